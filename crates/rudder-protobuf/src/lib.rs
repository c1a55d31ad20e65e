//! stub
#![allow(clippy::type_complexity, missing_docs)]
#[derive(Debug)]
pub struct DecodeError;
impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("x")
    }
}
impl std::error::Error for DecodeError {}
pub trait Message: Default {
    fn merge(&mut self, buf: &[u8]) -> Result<(), DecodeError>;
}
pub fn decode<T: Message>(_bytes: &[u8]) -> Result<T, DecodeError> {
    Err(DecodeError)
}
pub fn decoder<K: 'static>() -> Option<fn(&[u8]) -> Result<K, DecodeError>> {
    None
}
pub struct Unknown<'a> {
    pub api_version: &'a str,
    pub kind: &'a str,
    pub raw: &'a [u8],
    pub content_encoding: &'a str,
    pub content_type: &'a str,
}
pub fn unknown(_bytes: &[u8]) -> Result<Unknown<'_>, DecodeError> {
    Err(DecodeError)
}
pub struct List<K> {
    pub resource_version: Option<String>,
    pub continue_: Option<String>,
    pub remaining_item_count: Option<i64>,
    pub items: Vec<Result<K, DecodeError>>,
}
pub fn list<K>(
    _raw: &[u8],
    _item: fn(&[u8]) -> Result<K, DecodeError>,
) -> Result<List<K>, DecodeError> {
    Err(DecodeError)
}
pub struct WatchEvent<'a> {
    pub type_: &'a str,
    pub object: &'a [u8],
}
pub fn watch_event(_frame: &[u8]) -> Result<WatchEvent<'_>, DecodeError> {
    Err(DecodeError)
}
impl Message for k8s_openapi::apimachinery::pkg::apis::meta::v1::Status {
    fn merge(&mut self, _b: &[u8]) -> Result<(), DecodeError> {
        Ok(())
    }
}

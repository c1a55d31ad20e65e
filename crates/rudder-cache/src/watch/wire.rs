//! The wire: what the engine's requests accept and how their answers are read.
//!
//! A type that `rudder-protobuf` has a generated decoder for (the built-in types of
//! k8s-openapi) is asked for in protobuf (`application/vnd.kubernetes.protobuf`, JSON
//! accepted as well): a list answer is one `runtime.Unknown` envelope holding the `XxxList`
//! message, a watch answer a stream of frames, each a 4-byte big-endian length and a
//! `WatchEvent` message whose object is an envelope of its own. Everything else (custom
//! resources, dynamic objects, metadata-only watches, lenient decoding) goes as JSON through
//! kube-client, as does a type whose server answers JSON when asked for protobuf.

use std::io;
use std::sync::Arc;

use bytes::{Buf, Bytes, BytesMut};
use futures::stream::BoxStream;
use futures::{Stream, StreamExt};
use http::header::{ACCEPT, ACCEPT_ENCODING, CONTENT_TYPE};
use http_body_util::BodyExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
use kube::Resource;
use kube::client::Body;
use kube::core::watch::{Bookmark, BookmarkMeta};
use kube::core::{ObjectList, Status, TypeMeta, WatchEvent};
use rudder_protobuf::Decoder;
use serde::de::DeserializeOwned;

/// How an engine's lists and watches are encoded on the wire.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum WireFormat {
    /// Protobuf for every type Rudder has a generated decoder for (k8s-openapi's built-in
    /// types, as the API server serves them in protobuf), JSON for every other type (custom
    /// resources, dynamic objects, metadata-only watches). The default, as in client-go and
    /// controller-runtime.
    #[default]
    Protobuf,
    /// JSON for every type.
    Json,
}

impl WireFormat {
    /// The name used in logs and metrics: `protobuf` or `json`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Protobuf => "protobuf",
            Self::Json => "json",
        }
    }
}

/// A boxed error, for objects that do not decode.
pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// What the engine asks for in protobuf: protobuf first, JSON if the server has no protobuf
/// for the type (an aggregated API server may not).
const ACCEPT_PROTOBUF: &str = "application/vnd.kubernetes.protobuf, application/json";

/// The longest watch frame read: a length past it is garbage (an object in etcd is at most
/// a few MiB), and is not allocated for.
pub(crate) const MAX_FRAME: usize = 64 << 20;

/// Why an event could not be read: the request's failure (handled by the engine's rules),
/// or an object that did not decode (reported; the watch goes on).
#[derive(Debug)]
pub(crate) enum Failure {
    Kube(kube::Error),
    Decode(BoxError),
}

impl Failure {
    /// kube-client's error, classified: a watch line that is not a `WatchEvent<K>` comes as
    /// a `SerdeError` or, when it parses as a `Status` (every field of which is optional), as
    /// an API error with code 0, which a real status never has.
    pub(crate) fn of_kube(error: kube::Error) -> Self {
        match error {
            kube::Error::SerdeError(_) => Self::Decode(Box::new(error)),
            kube::Error::Api(ref status) if status.code == 0 => Self::Decode(Box::new(error)),
            other => Self::Kube(other),
        }
    }
}

/// A watch's events as the engine reads them. Each object is put behind an `Arc` as it is
/// decoded, the form the cache stores it in: from there on it moves as a pointer (a
/// `ConfigMap` is several hundred bytes, a `Pod` a few thousand, and an event passes through
/// a dozen moves between the decoder and the store).
pub(crate) type Events<K> = BoxStream<'static, Result<WatchEvent<Arc<K>>, Failure>>;

/// An answer read in protobuf, or the news that the server answered JSON.
pub(crate) enum Answer<T> {
    Protobuf(T),
    /// The server answered JSON (it has no protobuf for the type); for a list, the page
    /// decoded from it.
    Json(Option<T>),
}

/// One page of a list, its objects behind `Arc`s as a watch's are.
pub(crate) struct Page<K> {
    pub(crate) items: Vec<Arc<K>>,
    pub(crate) resource_version: Option<String>,
    pub(crate) continue_: Option<String>,
}

impl<K: Clone> From<ObjectList<K>> for Page<K> {
    fn from(list: ObjectList<K>) -> Self {
        Self {
            items: list.items.into_iter().map(Arc::new).collect(),
            resource_version: list.metadata.resource_version,
            continue_: list.metadata.continue_,
        }
    }
}

fn is_json(response: &http::Response<Body>) -> bool {
    response
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .is_some_and(|value| value.trim_start().starts_with("application/json"))
}

/// Opens a watch asking for protobuf.
pub(crate) async fn watch<K>(
    client: &kube::Client,
    mut request: http::Request<Vec<u8>>,
    decode: Decoder<K>,
    skip_managed_fields: bool,
) -> Result<Answer<Events<K>>, kube::Error>
where
    K: Resource + Send + 'static,
{
    let headers = request.headers_mut();
    headers.insert(ACCEPT, http::HeaderValue::from_static(ACCEPT_PROTOBUF));
    // As kube-client does for its watches: the API server gzips a watch one member per
    // event, which the client's decompression does not read.
    headers.insert(ACCEPT_ENCODING, http::HeaderValue::from_static("identity"));
    let response = checked(client.send(request.map(Body::from)).await?).await?;
    if is_json(&response) {
        return Ok(Answer::Json(None));
    }
    let frames = frames(response.into_body());
    let events = frames.map(move |frame| match frame {
        Ok(frame) if skip_managed_fields => {
            rudder_protobuf::without_managed_fields(|| event(&frame, decode))
        }
        Ok(frame) => event(&frame, decode),
        Err(error) => Err(Failure::Kube(kube::Error::ReadEvents(error))),
    });
    Ok(Answer::Protobuf(events.boxed()))
}

/// Reads a page of a list asking for protobuf.
pub(crate) async fn list<K>(
    client: &kube::Client,
    url: &str,
    params: &kube::api::ListParams,
    decode: Decoder<K>,
    skip_managed_fields: bool,
) -> Result<Answer<Page<K>>, Failure>
where
    K: Clone + DeserializeOwned,
{
    let mut request = kube::core::Request::new(url)
        .list(params)
        .map_err(|error| Failure::Kube(kube::Error::BuildRequest(error)))?;
    request
        .headers_mut()
        .insert(ACCEPT, http::HeaderValue::from_static(ACCEPT_PROTOBUF));
    let response = client
        .send(request.map(Body::from))
        .await
        .map_err(Failure::Kube)?;
    let response = checked(response).await.map_err(Failure::Kube)?;
    let json = is_json(&response);
    let body = response
        .into_body()
        .collect()
        .await
        .map_err(Failure::Kube)?
        .to_bytes();
    if json {
        let list: ObjectList<K> = serde_json::from_slice(&body)
            .map_err(|error| Failure::Decode(Box::new(kube::Error::SerdeError(error))))?;
        return Ok(Answer::Json(Some(list.into())));
    }
    let envelope = rudder_protobuf::unknown(&body).map_err(decode_failure)?;
    let read = || rudder_protobuf::list(envelope.raw, decode);
    let list = if skip_managed_fields {
        rudder_protobuf::without_managed_fields(read)
    } else {
        read()
    }
    .map_err(decode_failure)?;
    let mut items = Vec::with_capacity(list.items.len());
    for item in list.items {
        items.push(item.map_err(decode_failure)?);
    }
    Ok(Answer::Protobuf(Page {
        items,
        resource_version: list.resource_version,
        continue_: list.continue_,
    }))
}

fn decode_failure(error: rudder_protobuf::DecodeError) -> Failure {
    Failure::Decode(Box::new(error))
}

/// `response` if it is a success; its `Status` as an error if not (read in protobuf or JSON,
/// as the server sent it).
async fn checked(response: http::Response<Body>) -> Result<http::Response<Body>, kube::Error> {
    let code = response.status();
    if !(code.is_client_error() || code.is_server_error()) {
        return Ok(response);
    }
    let json = is_json(&response);
    let body = response.into_body().collect().await?.to_bytes();
    let mut status = if json {
        serde_json::from_slice::<Status>(&body).ok()
    } else {
        status_of_protobuf(&body)
    }
    .unwrap_or_else(|| {
        let text = String::from_utf8_lossy(&body);
        Status::failure(text.trim(), "Failed to parse error data")
    });
    if status.code == 0 {
        status.code = code.as_u16();
    }
    Err(kube::Error::Api(status.boxed()))
}

/// A `Status` message in its envelope, as kube-client's type (the two share the JSON form).
fn status_of_protobuf(bytes: &[u8]) -> Option<Status> {
    let envelope = rudder_protobuf::unknown(bytes).ok()?;
    let status: meta::Status = rudder_protobuf::decode(envelope.raw).ok()?;
    serde_json::to_value(status)
        .ok()
        .and_then(|value| serde_json::from_value(value).ok())
}

/// A watch event read in JSON by kube-client, its object behind an `Arc` as a protobuf
/// event's is.
pub(crate) fn behind_arc<K>(event: WatchEvent<K>) -> WatchEvent<Arc<K>> {
    match event {
        WatchEvent::Added(object) => WatchEvent::Added(Arc::new(object)),
        WatchEvent::Modified(object) => WatchEvent::Modified(Arc::new(object)),
        WatchEvent::Deleted(object) => WatchEvent::Deleted(Arc::new(object)),
        WatchEvent::Bookmark(bookmark) => WatchEvent::Bookmark(bookmark),
        WatchEvent::Error(status) => WatchEvent::Error(status),
    }
}

/// One watch frame's event.
fn event<K: Resource>(frame: &[u8], decode: Decoder<K>) -> Result<WatchEvent<Arc<K>>, Failure> {
    let watch_event = rudder_protobuf::watch_event(frame).map_err(decode_failure)?;
    let envelope = rudder_protobuf::unknown(watch_event.object).map_err(decode_failure)?;
    let object = || decode(envelope.raw).map_err(decode_failure);
    Ok(match watch_event.type_ {
        "ADDED" => WatchEvent::Added(object()?),
        "MODIFIED" => WatchEvent::Modified(object()?),
        "DELETED" => WatchEvent::Deleted(object()?),
        "BOOKMARK" => {
            let object = object()?;
            let meta = object.meta();
            WatchEvent::Bookmark(Bookmark {
                types: TypeMeta {
                    api_version: envelope.api_version.to_owned(),
                    kind: envelope.kind.to_owned(),
                },
                metadata: BookmarkMeta {
                    resource_version: meta.resource_version.clone().unwrap_or_default(),
                    annotations: meta.annotations.clone().unwrap_or_default(),
                },
            })
        }
        "ERROR" => {
            let status: meta::Status =
                rudder_protobuf::decode(envelope.raw).map_err(decode_failure)?;
            let status: Status = serde_json::to_value(status)
                .and_then(serde_json::from_value)
                .map_err(|error| Failure::Decode(Box::new(error)))?;
            WatchEvent::Error(status.boxed())
        }
        other => {
            return Err(Failure::Decode(
                format!("a watch event of unknown type {other:?}").into(),
            ));
        }
    })
}

/// The frames of a protobuf watch body: each a 4-byte big-endian length and that many
/// bytes. The stream ends with the body (a partial frame at its end is dropped: the watch
/// is resumed from the last event read); a body cut off mid-chunk (an unexpected EOF) ends
/// it too, as kube-client's JSON watches do.
fn frames(body: Body) -> impl Stream<Item = Result<Bytes, io::Error>> + Send {
    // Boxed, so that each frame moves a pointer in and out of `unfold`'s future.
    let reader = Box::new(FrameReader {
        body: body.into_data_stream(),
        framer: Framer::default(),
    });
    futures::stream::unfold(Some(reader), |reader| async move {
        let mut reader = reader?;
        match reader.next().await {
            Some(Ok(frame)) => Some((Ok(frame), Some(reader))),
            Some(Err(error)) => Some((Err(error), None)),
            None => None,
        }
    })
}

struct FrameReader {
    body: http_body_util::BodyDataStream<Body>,
    framer: Framer,
}

impl FrameReader {
    async fn next(&mut self) -> Option<Result<Bytes, io::Error>> {
        loop {
            match self.framer.next_frame() {
                Ok(Some(frame)) => return Some(Ok(frame)),
                Ok(None) => {}
                Err(error) => return Some(Err(error)),
            }
            match self.body.next().await? {
                Ok(chunk) => self.framer.push(chunk),
                Err(error) => {
                    if is_unexpected_eof(&error) {
                        tracing::debug!(%error, "a protobuf watch ended mid-stream; resuming it");
                        return None;
                    }
                    return Some(Err(io::Error::other(error)));
                }
            }
        }
    }
}

/// Cuts the body's chunks into frames. A frame that lies whole in a chunk is a slice of it
/// (no copy: most frames, a streaming list's chunks holding many); only a frame split
/// across chunks is gathered into `partial`, which therefore stays the size of one frame.
#[derive(Default)]
pub(crate) struct Framer {
    /// The start of a frame whose end has not come yet.
    partial: BytesMut,
    /// What is left of the last chunk.
    chunk: Bytes,
}

impl Framer {
    /// Takes the body's next chunk; call once [`next_frame`](Self::next_frame) has none.
    pub(crate) fn push(&mut self, chunk: Bytes) {
        debug_assert!(
            self.chunk.is_empty(),
            "a chunk pushed before the last was read"
        );
        self.chunk = chunk;
    }

    /// The next whole frame, if the chunks so far hold one. `Ok(None)` once the last chunk
    /// is used up (the next one may then be pushed); an error (a length past
    /// [`MAX_FRAME`]) is final: the frame reader ends the watch there.
    pub(crate) fn next_frame(&mut self) -> Result<Option<Bytes>, io::Error> {
        if self.partial.is_empty() {
            if let Some(length) = frame_length(&self.chunk)?
                && self.chunk.len() >= 4 + length
            {
                self.chunk.advance(4);
                return Ok(Some(self.chunk.split_to(length)));
            }
            // The chunk ends inside a frame: its start waits in `partial`.
            self.partial.extend_from_slice(&self.chunk);
            self.chunk.clear();
            if let Some(length) = frame_length(&self.partial)? {
                self.room_for(length);
            }
            return Ok(None);
        }
        // Complete the frame in `partial` from the chunk: its length first, then its bytes.
        if self.partial.len() < 4 {
            let take = (4 - self.partial.len()).min(self.chunk.len());
            self.partial.extend_from_slice(&self.chunk.split_to(take));
        }
        let Some(length) = frame_length(&self.partial)? else {
            return Ok(None);
        };
        self.room_for(length);
        let take = (4 + length - self.partial.len()).min(self.chunk.len());
        self.partial.extend_from_slice(&self.chunk.split_to(take));
        if self.partial.len() < 4 + length {
            return Ok(None);
        }
        self.partial.advance(4);
        Ok(Some(self.partial.split().freeze()))
    }

    /// Room in `partial` for the rest of a frame of `length` bytes, at most a MiB ahead: a
    /// length announced by four bytes is not taken on trust for a large reservation (what
    /// comes past it grows the buffer as it comes).
    fn room_for(&mut self, length: usize) {
        self.partial
            .reserve((4 + length - self.partial.len()).min(1 << 20));
    }

    /// The bytes held that are not a frame yet.
    #[cfg(any(test, fuzzing))]
    pub(crate) fn buffered(&self) -> usize {
        self.partial.len() + self.chunk.len()
    }

    /// What the gathering buffer has allocated.
    #[cfg(any(test, fuzzing))]
    pub(crate) fn reserved(&self) -> usize {
        self.partial.capacity()
    }
}

/// The length a frame starting at `bytes` announces, once its four bytes are there; an
/// error past [`MAX_FRAME`].
fn frame_length(bytes: &[u8]) -> Result<Option<usize>, io::Error> {
    let Some(&[a, b, c, d]) = bytes.first_chunk::<4>() else {
        return Ok(None);
    };
    let length = u32::from_be_bytes([a, b, c, d]) as usize;
    if length > MAX_FRAME {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("a watch frame of {length} bytes, more than the {MAX_FRAME} allowed"),
        ));
    }
    Ok(Some(length))
}

/// Whether a body error is the connection's end mid-stream (a TLS stack's nested
/// `UnexpectedEof`, or hyper's chunk decoder's), which ends a watch to be resumed.
fn is_unexpected_eof(error: &kube::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(current) = source {
        if let Some(io) = current.downcast_ref::<io::Error>()
            && io.kind() == io::ErrorKind::UnexpectedEof
        {
            return true;
        }
        if current.to_string().contains("unexpected EOF during chunk") {
            return true;
        }
        source = current.source();
    }
    false
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// Every frame `framer` gives for `chunks` pushed one after another.
    fn read(framer: &mut Framer, chunks: impl IntoIterator<Item = Bytes>) -> Vec<Bytes> {
        let mut out = Vec::new();
        for chunk in chunks {
            framer.push(chunk);
            while let Some(frame) = framer.next_frame().unwrap() {
                out.push(frame);
            }
        }
        out
    }

    /// `payloads` as a watch body: each after its 4-byte length.
    fn framed(payloads: &[&[u8]]) -> Bytes {
        let mut wire = Vec::new();
        for payload in payloads {
            wire.extend_from_slice(&u32::try_from(payload.len()).unwrap().to_be_bytes());
            wire.extend_from_slice(payload);
        }
        Bytes::from(wire)
    }

    #[test]
    fn frames_are_split_whole_whatever_the_chunks() {
        let wire = framed(&[b"abc", b"", b"0123456789"]);
        for size in 1..=wire.len() {
            let mut framer = Framer::default();
            let chunks = (0..wire.len())
                .step_by(size)
                .map(|at| wire.slice(at..(at + size).min(wire.len())));
            let out = read(&mut framer, chunks);
            assert_eq!(out, [&b"abc"[..], b"", b"0123456789"], "chunks of {size}");
            assert_eq!(framer.buffered(), 0);
        }
    }

    #[test]
    fn a_frame_whole_in_its_chunk_is_not_copied() {
        // The second frame's length and the first byte of its payload end the first chunk.
        let wire = framed(&[b"first", b"second", b"third"]);
        let (first, second) = (wire.slice(..14), wire.slice(14..));
        let mut framer = Framer::default();
        let out = read(&mut framer, [first.clone(), second.clone()]);
        assert_eq!(out, [&b"first"[..], b"second", b"third"]);
        let within = |frame: &Bytes, chunk: &Bytes| {
            let range = chunk.as_ptr_range();
            range.contains(&frame.as_ptr())
        };
        assert!(within(&out[0], &first), "a slice of its chunk");
        assert!(
            !within(&out[1], &first) && !within(&out[1], &second),
            "gathered"
        );
        assert!(within(&out[2], &second), "a slice of its chunk");
        // Only the frame across the chunks was gathered.
        assert!(framer.reserved() < 64, "{}", framer.reserved());
    }

    #[test]
    fn a_frame_longer_than_allowed_is_an_error_not_an_allocation() {
        for chunks in [
            vec![Bytes::copy_from_slice(&u32::MAX.to_be_bytes())],
            vec![
                Bytes::from_static(&[0xff, 0xff]),
                Bytes::from_static(&[0xff, 0xff, 0]),
            ],
        ] {
            let mut framer = Framer::default();
            let mut error = None;
            for chunk in chunks {
                framer.push(chunk);
                match framer.next_frame() {
                    Ok(frame) => assert!(frame.is_none()),
                    Err(e) => error = Some(e),
                }
            }
            assert_eq!(error.unwrap().kind(), io::ErrorKind::InvalidData);
            assert!(framer.reserved() < 1024);
        }
    }

    #[test]
    fn a_kube_decode_error_is_a_decode_failure() {
        let serde = serde_json::from_str::<u8>("x").unwrap_err();
        assert!(matches!(
            Failure::of_kube(kube::Error::SerdeError(serde)),
            Failure::Decode(_)
        ));
        assert!(matches!(
            Failure::of_kube(kube::Error::LinesCodecMaxLineLengthExceeded),
            Failure::Kube(_)
        ));
    }
}

//! Downloads over HTTP(S): small files into memory, large ones streamed to disk while their
//! SHA-512 is computed, each checked against the length the server announced.

use std::fs::File;
use std::io::{ErrorKind, Read, Write};
use std::path::Path;
use std::time::Duration;

use ring::digest::{Context, SHA512};

use crate::error::{Error, Result};

/// How long a connection may take to open.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// How long one read may wait for bytes: a stalled transfer fails instead of hanging, and a
/// slow but moving one of any size completes.
const READ_TIMEOUT: Duration = Duration::from_secs(60);

/// A blocking client: rustls with `ring` and Mozilla's roots, redirects followed (GitHub's
/// and dl.k8s.io's downloads redirect to their storage), proxies from the environment.
#[derive(Clone)]
pub(crate) struct Http {
    agent: ureq::Agent,
}

/// A file downloaded to disk.
pub(crate) struct Downloaded {
    /// Its SHA-512, lowercase hex.
    pub(crate) sha512: String,
}

impl Http {
    pub(crate) fn new() -> Self {
        let config = ureq::Agent::config_builder()
            .timeout_connect(Some(CONNECT_TIMEOUT))
            .timeout_per_read(Some(READ_TIMEOUT))
            .user_agent(concat!("rudder-envtest-setup/", env!("CARGO_PKG_VERSION")))
            .build();
        Self {
            agent: config.into(),
        }
    }

    /// A small text file (an index, a checksum) of at most `limit` bytes.
    pub(crate) fn text(&self, url: &str, limit: u64) -> Result<String> {
        let mut bytes = Vec::new();
        self.fetch(url, &mut bytes, Some(limit))?;
        String::from_utf8(bytes).map_err(|e| Error::Http {
            url: url.to_owned(),
            source: Box::new(e),
        })
    }

    /// Streams `url` into a new file at `path`, computing its SHA-512 on the way.
    pub(crate) fn to_file(&self, url: &str, path: &Path) -> Result<Downloaded> {
        let mut file = File::create(path).map_err(|e| Error::io("create", path, e))?;
        let sha512 = self.fetch(url, &mut file, None)?;
        file.sync_all().map_err(|e| Error::io("write", path, e))?;
        Ok(Downloaded { sha512 })
    }

    /// Copies the body of `url` into `out` and returns its SHA-512. Fails with
    /// [`Error::Truncated`] when fewer bytes arrive than the server announced.
    fn fetch(&self, url: &str, out: &mut dyn Write, limit: Option<u64>) -> Result<String> {
        let http = |e: ureq::Error| match e {
            ureq::Error::StatusCode(status) => Error::Status {
                url: url.to_owned(),
                status,
            },
            other => Error::Http {
                url: url.to_owned(),
                source: Box::new(other),
            },
        };
        let response = self.agent.get(url).call().map_err(http)?;
        let expected = response.body().content_length();
        if let (Some(limit), Some(expected)) = (limit, expected)
            && expected > limit
        {
            return Err(Error::TooLarge {
                url: url.to_owned(),
                limit,
            });
        }
        let mut reader = response.into_body().into_reader();
        let mut digest = Context::new(&SHA512);
        let mut buf = vec![0; 64 * 1024];
        let mut received: u64 = 0;
        let truncated = |received| Error::Truncated {
            url: url.to_owned(),
            received,
            expected: expected.unwrap_or_default(),
        };
        loop {
            let n = match reader.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == ErrorKind::UnexpectedEof && expected.is_some() => {
                    return Err(truncated(received));
                }
                Err(e) => {
                    return Err(Error::Http {
                        url: url.to_owned(),
                        source: Box::new(e),
                    });
                }
            };
            received += n as u64;
            if limit.is_some_and(|limit| received > limit) {
                return Err(Error::TooLarge {
                    url: url.to_owned(),
                    limit: limit.unwrap_or_default(),
                });
            }
            let chunk = buf.get(..n).unwrap_or_default();
            digest.update(chunk);
            out.write_all(chunk).map_err(|e| Error::Http {
                url: url.to_owned(),
                source: Box::new(e),
            })?;
        }
        if expected.is_some_and(|expected| received != expected) {
            return Err(truncated(received));
        }
        Ok(hex(digest.finish().as_ref()))
    }
}

/// Lowercase hex.
pub(crate) fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut text = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        text.push(char::from(DIGITS[usize::from(b >> 4)]));
        text.push(char::from(DIGITS[usize::from(b & 0xf)]));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sha512(bytes: &[u8]) -> String {
        hex(ring::digest::digest(&SHA512, bytes).as_ref())
    }

    #[test]
    fn sha512_is_the_published_one_for_known_input() {
        // FIPS 180-2's example: SHA-512("abc").
        assert_eq!(
            sha512(b"abc"),
            "ddaf35a193617abacc417349ae20413112e6fa4e89a97ea20a9eeee64b55d39a\
             2192992a274fc1a836ba3c23a3feebbd454d4423643ce80e2a9ac94fa54ca49f"
        );
        assert_eq!(hex(&[0, 15, 16, 255]), "000f10ff");
    }
}

//! The protobuf watch frame reader (rudder-cache's engine): the frames read from the bytes
//! split into arbitrary chunks are those read from the bytes whole, and a length past the
//! bound is an error, never an allocation.
//!
//! Input: one byte choosing the chunk sizes' seed, then the stream's bytes.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use rudder_cache::fuzzing::{Framer, MAX_FRAME};

/// Every frame read from `pieces` fed one after another, and how reading ended: `Ok` with
/// the bytes left over, or the error's position (the frames read before it).
fn read<'a>(pieces: impl Iterator<Item = &'a [u8]>) -> (Vec<Bytes>, Result<usize, ()>) {
    let mut framer = Framer::default();
    let mut frames = Vec::new();
    for piece in pieces {
        framer.push(Bytes::copy_from_slice(piece));
        loop {
            match framer.next_frame() {
                Ok(Some(frame)) => frames.push(frame),
                Ok(None) => break,
                Err(_) => {
                    // A length past the bound: refused, and not allocated for.
                    assert!(
                        framer.reserved() < MAX_FRAME,
                        "a refused frame's length was allocated"
                    );
                    return (frames, Err(()));
                }
            }
        }
    }
    (frames, Ok(framer.buffered()))
}

fuzz_target!(|data: &[u8]| {
    let Some((&seed, stream)) = data.split_first() else {
        return;
    };
    let whole = read(std::iter::once(stream));

    // The model: what a frame reader must give for `stream`.
    let mut expected = Vec::new();
    let mut rest = stream;
    let mut model_end = Ok(0);
    while rest.len() >= 4 {
        let length = u32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
        if length > MAX_FRAME {
            model_end = Err(());
            break;
        }
        if rest.len() < 4 + length {
            break;
        }
        expected.push(&rest[4..4 + length]);
        rest = &rest[4 + length..];
    }
    if model_end.is_ok() {
        model_end = Ok(rest.len());
    }
    assert_eq!(whole.0, expected, "frames read whole");
    assert_eq!(whole.1, model_end, "how reading ended");

    // The same bytes in chunks of pseudo-random sizes (from the seed).
    let mut state = u32::from(seed) | 1;
    let mut chunks = Vec::new();
    let mut at = 0;
    while at < stream.len() {
        state ^= state << 13;
        state ^= state >> 17;
        state ^= state << 5;
        let size = 1 + (state as usize % 9);
        let end = (at + size).min(stream.len());
        chunks.push(&stream[at..end]);
        at = end;
    }
    let chunked = read(chunks.into_iter());
    assert_eq!(chunked.0, whole.0, "frames read in chunks");
    assert_eq!(chunked.1, whole.1, "how reading in chunks ended");
});

//! The stable hashes sharding agrees on: FNV-1a 64 and a finaliser, whose values are fixed by
//! their definitions, so every replica of a sharded controller, whatever compiler, platform or
//! Rudder version built it, maps a key to the same shard and scores a shard's members alike.
//!
//! ```
//! use rudder_core::hash::{fnv1a, fnv1a64, mix};
//!
//! // Hashing in pieces gives what hashing the whole gives.
//! assert_eq!(fnv1a(fnv1a64(b"team-a/"), b"web"), fnv1a64(b"team-a/web"));
//! // The published test vector of FNV-1a 64.
//! assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
//! // `mix` spreads the low bits, which `% shards` reads.
//! assert_ne!(mix(1) % 8, mix(2) % 8);
//! ```

/// FNV-1a 64's offset basis: the hash of no bytes.
pub const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// FNV-1a 64 of `bytes`, continuing from `hash` (start from [`FNV_OFFSET`], or use
/// [`fnv1a64`]).
pub fn fnv1a(mut hash: u64, bytes: &[u8]) -> u64 {
    for byte in bytes {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(FNV_PRIME);
    }
    hash
}

/// FNV-1a 64 of `bytes` from the standard offset basis.
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    fnv1a(FNV_OFFSET, bytes)
}

/// A finaliser (splitmix64's) spreading FNV's weak low bits over the whole word.
pub fn mix(mut x: u64) -> u64 {
    x ^= x >> 30;
    x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x ^= x >> 27;
    x = x.wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a_matches_its_published_vectors() {
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x8594_4171_f739_67e8);
    }
}

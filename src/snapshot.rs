//! etcd's snapshot stream, checked as it passes: the database file followed by the SHA-256 of
//! that file, which `etcdutl snapshot restore` checks too. A stream that does not match is refused
//! before it is stored. And the revision the database holds (`bolt`).

mod bolt;
pub use bolt::SnapshotRevision;

/// etcd's snapshot stream is the database file followed by the SHA-256 of that file (32 bytes):
/// the server appends it as the stream's last message, and `etcdutl snapshot restore` refuses a
/// file whose trailer does not match ("snapshot file integrity check failed").
/// https://github.com/etcd-io/etcd/blob/v3.5.30/server/etcdserver/api/v3rpc/maintenance.go
/// (Snapshot: "send hash at the end"); etcdutl/snapshot/v3_snapshot.go (restore's check).
/// Fed the stream chunk by chunk, it keeps the last 32 bytes aside and hashes the rest, so a
/// truncated or corrupted stream is refused before it is stored.
#[derive(Default)]
pub struct SnapshotIntegrity {
    body: sha2::Sha256,
    tail: Vec<u8>,
}

const TRAILER: usize = 32;

impl SnapshotIntegrity {
    pub fn feed(&mut self, chunk: &[u8]) {
        use sha2::Digest;
        if chunk.len() >= TRAILER {
            // Everything held back so far, and all of this chunk but its last 32 bytes, is body.
            self.body.update(&self.tail);
            let (body, tail) = chunk.split_at(chunk.len() - TRAILER);
            self.body.update(body);
            self.tail.clear();
            self.tail.extend_from_slice(tail);
        } else {
            self.tail.extend_from_slice(chunk);
            let excess = self.tail.len().saturating_sub(TRAILER);
            self.body.update(&self.tail[..excess]);
            self.tail.drain(..excess);
        }
    }

    /// Whether the last 32 bytes are the SHA-256 of everything before them; if so, the SHA-256
    /// of the whole stream (what is stored, trailer included), from the same pass. The error
    /// says what was wrong (never the data).
    pub fn verify(self) -> Result<[u8; 32], String> {
        use sha2::Digest;
        if self.tail.len() < TRAILER {
            return Err(format!(
                "the stream ended after {} bytes, before etcd's SHA-256 trailer",
                self.tail.len()
            ));
        }
        let mut whole = self.body.clone();
        let digest = self.body.finalize();
        if digest.as_slice() != self.tail.as_slice() {
            return Err(
                "the database's SHA-256 does not match the trailer etcd sent: truncated or \
                 corrupted on the way"
                    .into(),
            );
        }
        whole.update(&self.tail);
        Ok(whole.finalize().into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stream(db: &[u8]) -> Vec<u8> {
        use sha2::Digest;
        let mut s = db.to_vec();
        s.extend_from_slice(&sha2::Sha256::digest(db));
        s
    }

    fn checked(stream: &[u8], chunk: usize) -> Result<(), String> {
        use sha2::Digest;
        let mut check = SnapshotIntegrity::default();
        for c in stream.chunks(chunk.max(1)) {
            check.feed(c);
        }
        let whole = check.verify()?;
        // And the whole stream's SHA-256 with it, in the same pass.
        assert_eq!(whole, <[u8; 32]>::from(sha2::Sha256::digest(stream)));
        Ok(())
    }

    #[test]
    fn a_snapshot_stream_is_checked_against_etcds_trailing_sha256_in_any_chunking() {
        let db: Vec<u8> = (0..10_000u32).map(|n| (n * 7 % 251) as u8).collect();
        let good = stream(&db);
        for chunk in [1, 5, 31, 32, 33, 4096, good.len()] {
            assert_eq!(checked(&good, chunk), Ok(()), "chunks of {chunk}");
        }
        let mut flipped = good.clone();
        flipped[5000] ^= 1;
        let truncated = &good[..good.len() - 100];
        for (bad, what) in [(&flipped[..], "flipped"), (truncated, "truncated")] {
            for chunk in [1, 33, 4096] {
                let e = checked(bad, chunk).unwrap_err();
                assert!(e.contains("does not match"), "{what}, {chunk}: {e}");
            }
        }
        // An empty database still has its trailer; a stream shorter than one has none.
        assert_eq!(checked(&stream(b""), 7), Ok(()));
        assert!(checked(&good[..20], 7)
            .unwrap_err()
            .contains("before etcd's SHA-256 trailer"));
    }
}

//! A member's database streamed out of etcd's JSON gateway, chunk by chunk.

use serde::Deserialize;
use serde_json::{json, Value};

use super::{EtcdMembers, HEALTH_TIMEOUT, SNAPSHOT_TIMEOUT};
use crate::error::Error;
use crate::ports::{NextChunk, Snapshot, SnapshotStream};

/// The JSON gateway's server stream: one `{"result": {...}}` object per line, each carrying a
/// base64 `blob` of the database; an `{"error": ...}` object ends it badly. Read without
/// copies: lines are parsed where they lie in the buffer (the blob borrowed), and decoded
/// straight into the chunk handed on.
struct SnapshotLines {
    response: reqwest::Response,
    endpoint: String,
    pending: Vec<u8>,
    /// Where the first unread line of `pending` begins.
    start: usize,
    finished: bool,
}

#[derive(Deserialize)]
struct SnapshotLine<'a> {
    #[serde(borrow)]
    result: Option<SnapshotChunk<'a>>,
    error: Option<Value>,
}

#[derive(Deserialize)]
struct SnapshotChunk<'a> {
    /// Borrowed from the line unless JSON escapes had to be undone (base64 has none).
    #[serde(default, borrow)]
    blob: std::borrow::Cow<'a, str>,
}

impl SnapshotLines {
    fn broken(&self, detail: String) -> Error {
        Error::EtcdProtocol {
            operation: "snapshot",
            detail: format!("from {}: {detail}", self.endpoint),
        }
    }

    /// The next decoded chunk, reading more of the body while no whole line is buffered.
    async fn next(&mut self) -> Result<Option<Vec<u8>>, Error> {
        loop {
            let unread = &self.pending[self.start..];
            if let Some(n) = memchr::memchr(b'\n', unread) {
                let (from, to) = (self.start, self.start + n);
                self.start = to + 1;
                match self.decode(from, to)? {
                    Some(bytes) => return Ok(Some(bytes)),
                    None => continue,
                }
            }
            // Keep the unread tail only; amortized, as the buffer grows by whole reads.
            self.pending.drain(..self.start);
            self.start = 0;
            if self.finished {
                if self.pending.iter().all(u8::is_ascii_whitespace) {
                    return Ok(None);
                }
                // The last message without its newline.
                self.pending.push(b'\n');
                continue;
            }
            match self.response.chunk().await {
                Ok(Some(bytes)) => self.pending.extend_from_slice(&bytes),
                Ok(None) => self.finished = true,
                Err(e) => {
                    return Err(Error::EtcdUnavailable {
                        operation: "snapshot",
                        endpoint: self.endpoint.clone(),
                        source: Box::new(e),
                    })
                }
            }
        }
    }

    /// The bytes of the line `pending[from..to]`; None for a blank line or an empty blob.
    /// A line with a blob (`"blob":"…"`, which only a key can spell: a quote inside a JSON
    /// string is escaped) is decoded where it lies; any other line is parsed whole (an error,
    /// a header alone). A blob whose bytes were not etcd's fails its SHA-256 trailer anyway.
    fn decode(&self, from: usize, to: usize) -> Result<Option<Vec<u8>>, Error> {
        use base64::Engine;
        const BLOB: &[u8] = b"\"blob\":\"";
        let line = &self.pending[from..to];
        if let Some(at) = memchr::memmem::find(line, BLOB) {
            let rest = &line[at + BLOB.len()..];
            let end = memchr::memchr(b'"', rest)
                .ok_or_else(|| self.broken("a chunk's blob is not closed".into()))?;
            let mut bytes = Vec::with_capacity(end / 4 * 3 + 3);
            base64::engine::general_purpose::STANDARD
                .decode_vec(&rest[..end], &mut bytes)
                .map_err(|e| self.broken(format!("a chunk is not base64: {e}")))?;
            return Ok((!bytes.is_empty()).then_some(bytes));
        }
        if line.iter().all(u8::is_ascii_whitespace) {
            return Ok(None);
        }
        let parsed: SnapshotLine = serde_json::from_slice(line)
            .map_err(|e| self.broken(format!("unreadable stream message: {e}")))?;
        if let Some(e) = parsed.error {
            return Err(self.broken(format!("etcd ended the stream: {e}")));
        }
        let Some(blob) = parsed.result.map(|r| r.blob).filter(|b| !b.is_empty()) else {
            return Ok(None);
        };
        let mut bytes = Vec::with_capacity(blob.len() / 4 * 3 + 3);
        base64::engine::general_purpose::STANDARD
            .decode_vec(blob.as_bytes(), &mut bytes)
            .map_err(|e| self.broken(format!("a chunk is not base64: {e}")))?;
        Ok((!bytes.is_empty()).then_some(bytes))
    }
}

impl SnapshotStream for SnapshotLines {
    fn next_chunk(&mut self) -> NextChunk<'_> {
        Box::pin(self.next())
    }
}

impl EtcdMembers {
    /// The member's database as etcd's maintenance Snapshot streams it (no quorum needed).
    pub(super) async fn stream(&self, endpoint: &str) -> Result<Snapshot, Error> {
        // A survivor answers for itself: ask it whether a user is needed before streaming (a
        // served cluster's observation asked already).
        if self.root.get().is_some() && !self.auth_seen.load(std::sync::atomic::Ordering::Relaxed) {
            self.auth_enabled(endpoint).await?;
        }
        // The stream is one request, with one token: learn first which key this member takes
        // (a bundle from before the token key verifies only the CA's) with a call that checks
        // the token on 3.4 too: a serializable read of nothing, which the member answers alone
        // (its answer, "auth revision is old" for root tokens, does not matter). A failure here
        // is the snapshot's to report.
        if self.root.get().is_some() && self.auth_seen.load(std::sync::atomic::Ordering::Relaxed) {
            let nothing = json!({"key": "AA==", "serializable": true, "count_only": true});
            let _ = self
                .call::<Value>(
                    "range",
                    endpoint,
                    "/v3/kv/range",
                    nothing,
                    Some(HEALTH_TIMEOUT),
                )
                .await;
        }
        let url = format!("{}/v3/maintenance/snapshot", endpoint.trim_end_matches('/'));
        let mut request = self
            .client()?
            .post(url)
            .json(&json!({}))
            .timeout(SNAPSHOT_TIMEOUT);
        if let Some(token) = self.token(endpoint)? {
            request = request.header(reqwest::header::AUTHORIZATION, token);
        }
        let response = request.send().await.map_err(|e| Error::EtcdUnavailable {
            operation: "snapshot",
            endpoint: endpoint.to_string(),
            source: Box::new(e),
        })?;
        if !response.status().is_success() {
            return Err(Error::EtcdProtocol {
                operation: "snapshot",
                detail: format!("{endpoint} answered HTTP {}", response.status()),
            });
        }
        Ok(Box::new(SnapshotLines {
            response,
            endpoint: endpoint.to_string(),
            pending: Vec::new(),
            start: 0,
            finished: false,
        }))
    }
}

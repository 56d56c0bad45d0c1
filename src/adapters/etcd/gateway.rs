//! The etcd v3 JSON gateway's wire: one POST and what its answers and refusals look like.
//! etcd sends every 64-bit integer as a JSON string.

use std::time::Duration;

use serde::de::{DeserializeOwned, Deserializer};
use serde::Deserialize;
use serde_json::Value;

use crate::error::{Error, Refusal};
use crate::model::{Member, MemberId, MemberStatus};

/// etcd sends every 64-bit integer as a JSON string; accept a bare number too.
pub(super) fn id<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        S(String),
        N(u64),
    }
    match Raw::deserialize(d)? {
        Raw::N(n) => Ok(n),
        Raw::S(s) => s.parse().map_err(serde::de::Error::custom),
    }
}

#[derive(Deserialize, Default)]
pub(super) struct Header {
    #[serde(default, deserialize_with = "id")]
    pub(super) cluster_id: u64,
    #[serde(default, deserialize_with = "id")]
    pub(super) member_id: u64,
}

#[derive(Deserialize)]
pub(super) struct WireMember {
    #[serde(rename = "ID", deserialize_with = "id")]
    pub(super) id: u64,
    #[serde(default)]
    pub(super) name: String,
    #[serde(rename = "peerURLs", default)]
    pub(super) peer_urls: Vec<String>,
    #[serde(rename = "clientURLs", default)]
    pub(super) client_urls: Vec<String>,
    #[serde(rename = "isLearner", default)]
    pub(super) is_learner: bool,
}

impl From<WireMember> for Member {
    fn from(w: WireMember) -> Self {
        Member {
            id: MemberId(w.id),
            name: w.name,
            peer_urls: w.peer_urls,
            client_urls: w.client_urls,
            is_learner: w.is_learner,
        }
    }
}

#[derive(Deserialize)]
pub(super) struct ListResponse {
    #[serde(default)]
    pub(super) header: Header,
    #[serde(default)]
    pub(super) members: Vec<WireMember>,
}

#[derive(Deserialize)]
pub(super) struct StatusResponse {
    #[serde(default)]
    pub(super) header: StatusHeader,
    #[serde(default, deserialize_with = "id")]
    pub(super) leader: u64,
    #[serde(rename = "dbSize", default, deserialize_with = "id")]
    pub(super) db_size: u64,
    /// 3.4+; absent (0) means the same as the file.
    #[serde(rename = "dbSizeInUse", default, deserialize_with = "id")]
    pub(super) db_size_in_use: u64,
    #[serde(default)]
    pub(super) version: String,
}

#[derive(Deserialize, Default)]
pub(super) struct StatusHeader {
    #[serde(default, deserialize_with = "id")]
    pub(super) revision: u64,
    #[serde(default, deserialize_with = "id")]
    pub(super) member_id: u64,
}

impl From<&StatusResponse> for MemberStatus {
    fn from(s: &StatusResponse) -> Self {
        MemberStatus {
            db_size: s.db_size,
            db_size_in_use: if s.db_size_in_use == 0 {
                s.db_size
            } else {
                s.db_size_in_use
            },
            version: s.version.clone(),
            revision: s.header.revision as i64,
        }
    }
}

#[derive(Deserialize, Default)]
pub(super) struct AlarmResponse {
    #[serde(default)]
    pub(super) alarms: Vec<WireAlarm>,
}

#[derive(Deserialize)]
pub(super) struct WireAlarm {
    #[serde(rename = "memberID", default, deserialize_with = "id")]
    pub(super) member_id: u64,
    /// Absent means NONE (protobuf's default).
    #[serde(default)]
    pub(super) alarm: String,
}

#[derive(Deserialize)]
pub(super) struct AddResponse {
    pub(super) member: WireMember,
}

/// 3.4/3.5 send `error` and `message`, 3.6 only `message`.
#[derive(Deserialize)]
pub(super) struct ErrorBody {
    pub(super) message: Option<String>,
    pub(super) error: Option<String>,
}

/// One POST to the JSON gateway. A refusal is read from the answer's `message`, not its HTTP
/// status: builds map the same error to different statuses.
pub(super) async fn call<T: DeserializeOwned>(
    client: &reqwest::Client,
    operation: &'static str,
    endpoint: &str,
    path: &str,
    body: Value,
    timeout: Option<Duration>,
    token: Option<&str>,
) -> Result<T, Error> {
    let unavailable = |e: reqwest::Error| Error::EtcdUnavailable {
        operation,
        endpoint: endpoint.to_string(),
        source: Box::new(e),
    };
    let mut request = client
        .post(format!("{}{path}", endpoint.trim_end_matches('/')))
        .json(&body);
    if let Some(t) = timeout {
        request = request.timeout(t);
    }
    if let Some(token) = token {
        request = request.header(reqwest::header::AUTHORIZATION, token);
    }
    // The gateway marks what it forwards by the Accept header; etcd then never takes the user
    // from the gateway's own certificate.
    let response = request
        .header(reqwest::header::ACCEPT, "application/json")
        .send()
        .await
        .map_err(unavailable)?;
    let status = response.status();
    let bytes = response.bytes().await.map_err(unavailable)?;
    let protocol = |detail: String| Error::EtcdProtocol { operation, detail };
    if status.is_success() {
        return serde_json::from_slice(&bytes).map_err(|e| protocol(format!("{e}")));
    }
    let body: ErrorBody = serde_json::from_slice(&bytes).map_err(|_| {
        protocol(format!(
            "HTTP {status}: {}",
            String::from_utf8_lossy(&bytes[..bytes.len().min(200)])
        ))
    })?;
    let message = body.message.or(body.error).unwrap_or_default();
    Err(Error::EtcdRefused {
        operation,
        refusal: Refusal::from_message(&message),
        message,
    })
}

/// `call` with each of `tokens` in turn while the last was refused as an invalid token (a
/// member verifying another key's); none: one call without. Also says how many were refused.
pub(super) async fn call_with<T: DeserializeOwned>(
    client: &reqwest::Client,
    operation: &'static str,
    endpoint: &str,
    path: &str,
    body: &Value,
    timeout: Option<Duration>,
    tokens: &[String],
) -> (Result<T, Error>, usize) {
    let mut tried = 0;
    loop {
        let token = tokens.get(tried).map(String::as_str);
        let r = call(
            client,
            operation,
            endpoint,
            path,
            body.clone(),
            timeout,
            token,
        )
        .await;
        let invalid = matches!(&r, Err(e) if e.refusal() == Some(Refusal::InvalidAuthToken));
        if !invalid || tried + 1 >= tokens.len() {
            return (r, tried);
        }
        tried += 1;
    }
}

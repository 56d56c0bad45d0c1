//! etcd's authentication: the function as `root` through tokens of the cluster's keys, turning
//! authentication on, users and their prefixes.

use serde_json::{json, Value};

use super::gateway::call;
use super::{unix_now, EtcdMembers};
use crate::error::{Error, Refusal};
use crate::model::TokenKind;
use crate::pki::RootTokens;
use crate::ports::PrefixGrant;

impl EtcdMembers {
    /// A fresh root token for `endpoint`, if the function holds the signers and etcd asked for a
    /// user: from the signer the endpoint took last, else the first.
    pub(super) fn token(&self, endpoint: &str) -> Result<Option<String>, Error> {
        Ok(self.tokens(endpoint)?.into_iter().next())
    }

    /// Root tokens for `endpoint`: the one it gave the function when it logged in there, if it
    /// did (`log_in`), then fresh ones, one per signer, the one it took last first; none while
    /// etcd has not asked for a user.
    pub(super) fn tokens(&self, endpoint: &str) -> Result<Vec<String>, Error> {
        let login = self.login_token(endpoint);
        let Some(root) = self
            .root
            .get()
            .filter(|_| self.auth_seen.load(std::sync::atomic::Ordering::Relaxed))
            .filter(|_| !self.login_first.lock().unwrap().contains(endpoint))
        else {
            return Ok(login.into_iter().collect());
        };
        let first = self.signer_of(endpoint);
        let now = unix_now();
        let signed = (0..root.signers()).map(|n| root.token((first + n) % root.signers(), now));
        login.map(Ok).into_iter().chain(signed).collect()
    }

    fn signer_of(&self, endpoint: &str) -> usize {
        self.signers
            .lock()
            .unwrap()
            .get(endpoint)
            .copied()
            .unwrap_or(0)
    }

    /// Remembers that `endpoint` took the token `tried` places after its preferred one (its
    /// login token, where it gave one, comes before them all).
    pub(super) fn took(&self, endpoint: &str, tried: usize) {
        let tried = match self.login_token(endpoint) {
            Some(_) => tried.saturating_sub(1),
            None => tried,
        };
        if tried == 0 {
            return;
        }
        let n = self.root.get().map_or(1, RootTokens::signers);
        let signer = (self.signer_of(endpoint) + tried) % n;
        tracing::info!(
            endpoint,
            signer,
            "a member verifies tokens of another key (a bundle from before the token key)"
        );
        self.signers
            .lock()
            .unwrap()
            .insert(endpoint.to_string(), signer);
    }

    /// From now on, where a member refuses the function's tokens, log in there as `root` with
    /// `password` (an adopted cluster's members: see `EtcdMembers::password`).
    pub(super) fn with_root_password(
        &self,
        password: crate::pki::Password,
        login_first: &[String],
    ) {
        self.login_first
            .lock()
            .unwrap()
            .extend(login_first.iter().cloned());
        let mut kept = self.password.lock().unwrap();
        if kept.as_ref() != Some(&password) {
            tracing::info!("the adopted cluster's root password is known");
            *kept = Some(password);
            self.logins.lock().unwrap().clear();
        }
    }

    /// Whether the function knows an adopted cluster's root password, once etcd asked for a user.
    pub(super) fn password_known(&self) -> bool {
        self.password.lock().unwrap().is_some()
            && self.auth_seen.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The token `endpoint` gave the function when it logged in there, if it did.
    pub(super) fn login_token(&self, endpoint: &str) -> Option<String> {
        if !self.auth_seen.load(std::sync::atomic::Ordering::Relaxed) {
            return None;
        }
        self.logins.lock().unwrap().get(endpoint).cloned()
    }

    /// Whether a call was refused for its tokens (or for naming no user, with none to send) and
    /// a password may help.
    pub(super) fn may_log_in(&self, r: &Result<impl Sized, Error>) -> bool {
        let refused = matches!(r, Err(e) if matches!(
            e.refusal(),
            Some(Refusal::InvalidAuthToken | Refusal::UserEmpty)
        ));
        refused && self.password.lock().unwrap().is_some()
    }

    /// Logs in at `endpoint` as `root` with the adopted cluster's password (etcd's
    /// `Authenticate`, a raft write: it needs the cluster's quorum) and keeps its token for that
    /// endpoint. A refused password is an error saying so, never showing it.
    pub(super) async fn log_in(
        &self,
        client: &reqwest::Client,
        endpoint: &str,
        timeout: Option<std::time::Duration>,
    ) -> Result<(), Error> {
        let Some(password) = self.password.lock().unwrap().clone() else {
            return Ok(());
        };
        let body = json!({"name": crate::pki::ROOT_USER, "password": password.expose()});
        let path = "/v3/auth/authenticate";
        let operation = "auth login as root";
        let answer = call::<Value>(client, operation, endpoint, path, body, timeout, None)
            .await
            .map_err(|e| match &e {
                // etcd's ErrAuthFailed; anything else (no leader, no answer) is no verdict on
                // the password.
                Error::EtcdRefused { message, .. } if message.contains("authentication failed") => {
                    Error::EtcdRefused {
                        operation,
                        refusal: Refusal::Other,
                        message: format!(
                            "{endpoint} refused root's password (the adopted cluster's, \
                             etcd-asg adopt-secrets): {message}"
                        ),
                    }
                }
                _ => e,
            })?;
        let token = answer["token"].as_str().ok_or(Error::EtcdProtocol {
            operation: "auth login as root",
            detail: "no token in the answer".into(),
        })?;
        self.auth_seen
            .store(true, std::sync::atomic::Ordering::Relaxed);
        tracing::info!(
            endpoint,
            "logged in as root with the adopted cluster's password"
        );
        self.logins
            .lock()
            .unwrap()
            .insert(endpoint.to_string(), token.to_string());
        Ok(())
    }

    /// Whether a call made without a token was refused for naming no user, and we can be root:
    /// then it is tried again with a token, and tokens are sent from now on.
    pub(super) fn asks_for_root(&self, sent_token: bool, r: &Result<impl Sized, Error>) -> bool {
        let user_empty = matches!(r, Err(e) if e.refusal() == Some(Refusal::UserEmpty));
        !sent_token && user_empty && self.act_as_root()
    }

    /// etcd asked for a user: send root's tokens from now on, if we have them (false: we don't).
    pub(super) fn act_as_root(&self) -> bool {
        if self.root.get().is_none() && self.password.lock().unwrap().is_none() {
            return false;
        }
        if !self
            .auth_seen
            .swap(true, std::sync::atomic::Ordering::Relaxed)
        {
            tracing::info!("etcd asks for a user: acting as root from now on");
        }
        true
    }
    /// Whether etcd's authentication is on: a read without a token is refused for naming no user
    /// only then (3.4 has no auth status call). Serializable: the member answers alone, no quorum
    /// and no raft proposal. Remembered for the token (`auth_seen`).
    pub(super) async fn auth_enabled(&self, endpoint: &str) -> Result<bool, Error> {
        let body = json!({"key": "AA==", "serializable": true, "count_only": true});
        let client = self.client()?;
        let r = call::<Value>(
            &client,
            "auth probe",
            endpoint,
            "/v3/kv/range",
            body,
            None,
            None,
        );
        let on = match r.await {
            Ok(_) => false,
            Err(e) if e.refusal() == Some(Refusal::UserEmpty) => true,
            Err(e) => return Err(e),
        };
        self.auth_seen
            .store(on, std::sync::atomic::Ordering::Relaxed);
        Ok(on)
    }

    /// A cluster to adopt with authentication on: whether the function is its `root` (with its
    /// own tokens or the adopted cluster's password), by reading the root user, which etcd lets
    /// only root do. Some(etcd's refusal) when it is not; an unanswered call is an error.
    pub(super) async fn root_refused(&self, endpoint: &str) -> Result<Option<String>, Error> {
        let body = json!({"name": crate::pki::ROOT_USER});
        let r = self
            .call::<Value>("auth user get", endpoint, "/v3/auth/user/get", body, None)
            .await;
        match r {
            Ok(_) => Ok(None),
            Err(e) if e.refusal().is_some() => Ok(Some(e.to_string())),
            Err(e) => Err(e),
        }
    }

    /// A cluster to adopt with authentication on, the function its root: the kind of token each
    /// member's login gave. Each member is read once as root (a serializable count, which logs
    /// in first where the function's own tokens are refused) and its login token looked at; a
    /// failed read, or no login token kept, leaves the kind unknown.
    pub(super) async fn token_kinds(
        &self,
        members: &[crate::model::Member],
    ) -> Vec<(String, TokenKind)> {
        let mut out = vec![];
        for m in members {
            let kind = match m.client_urls.first() {
                None => TokenKind::Unknown,
                Some(url) => {
                    let body = json!({"key": "AA==", "serializable": true, "count_only": true});
                    let read = self
                        .call::<Value>("range", url, "/v3/kv/range", body, None)
                        .await;
                    match (read, self.login_token(url)) {
                        (Ok(_), Some(t)) if is_simple_token(&t) => TokenKind::Simple,
                        (Ok(_), Some(_)) => TokenKind::Jwt,
                        _ => TokenKind::Unknown,
                    }
                }
            };
            out.push((m.name.clone(), kind));
        }
        out
    }

    /// Whether `user` logs in with `password` through the gateway, as its programs will: a user
    /// made without a password (a certificate user of that name) cannot, whatever it is given.
    pub(super) async fn check_login(
        &self,
        endpoint: &str,
        user: &str,
        password: &crate::pki::Password,
    ) -> Result<(), Error> {
        let client = self.client()?;
        let body = json!({"name": user, "password": password.expose()});
        let path = "/v3/auth/authenticate";
        match call::<Value>(&client, "auth login", endpoint, path, body, None, None).await {
            Ok(_) => Ok(()),
            Err(e) if e.refusal().is_some() => Err(Error::Config {
                var: "USER".into(),
                value: user.into(),
                reason: format!(
                    "cannot log in with its new password ({e}): a certificate user of that \
                     name has no password; give the gateway user another name"
                ),
            }),
            Err(e) => Err(e),
        }
    }

    /// An auth call that may find its work done already (the user or role exists).
    pub(super) async fn ensure(
        &self,
        operation: &'static str,
        endpoint: &str,
        path: &str,
        body: Value,
    ) -> Result<(), Error> {
        match self.act(operation, endpoint, path, body).await {
            Err(e) if e.refusal() == Some(Refusal::AlreadyExists) => Ok(()),
            r => r,
        }
    }

    /// Authentication on: the `root` user (no password: the function is root through tokens)
    /// with the `root` role, then auth enable. Each part may already be done.
    pub(super) async fn turn_auth_on(&self, endpoint: &str) -> Result<(), Error> {
        let root = crate::pki::ROOT_USER;
        let user = json!({"name": root, "options": {"no_password": true}});
        self.ensure("auth user add", endpoint, "/v3/auth/user/add", user)
            .await?;
        let grant = json!({"user": root, "role": root});
        self.act("auth grant role", endpoint, "/v3/auth/user/grant", grant)
            .await?;
        self.act("auth enable", endpoint, "/v3/auth/enable", json!({}))
            .await
    }

    /// A role of the user's name holding the prefix's permission, granted to the user (made
    /// with its password, or without one for a certificate user).
    pub(super) async fn grant(&self, endpoint: &str, grant: &PrefixGrant) -> Result<(), Error> {
        use base64::Engine;
        let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
        let name = &grant.user;
        self.ensure(
            "auth role add",
            endpoint,
            "/v3/auth/role/add",
            json!({"name": name}),
        )
        .await?;
        let perm = json!({
            "permType": if grant.read_only { "READ" } else { "READWRITE" },
            "key": b64(grant.prefix.as_bytes()),
            "range_end": b64(&grant.range_end()),
        });
        let body = json!({"name": name, "perm": perm});
        self.act(
            "auth grant permission",
            endpoint,
            "/v3/auth/role/grant",
            body,
        )
        .await?;
        match &grant.password {
            None => {
                let user = json!({"name": name, "options": {"no_password": true}});
                self.ensure("auth user add", endpoint, "/v3/auth/user/add", user)
                    .await?;
            }
            Some(password) => {
                let user = json!({"name": name, "password": password.expose()});
                match self
                    .act("auth user add", endpoint, "/v3/auth/user/add", user.clone())
                    .await
                {
                    Err(e) if e.refusal() == Some(Refusal::AlreadyExists) => {
                        self.act(
                            "auth change password",
                            endpoint,
                            "/v3/auth/user/changepw",
                            user,
                        )
                        .await?
                    }
                    r => r?,
                }
            }
        }
        let body = json!({"user": name, "role": name});
        self.act("auth grant role", endpoint, "/v3/auth/user/grant", body)
            .await?;
        if let Some(password) = &grant.password {
            self.check_login(endpoint, name, password).await?;
        }
        Ok(())
    }
}

/// Whether `token` is one of etcd's simple tokens: 16 random letters, a dot and the raft index
/// of the login (`server/auth/simple_token.go`: `assign` formats `"%s.%d"`); a JWT has three
/// dot-separated parts (`server/auth/jwt.go`).
pub(super) fn is_simple_token(token: &str) -> bool {
    token.split_once('.').is_some_and(|(prefix, index)| {
        prefix.chars().all(|c| c.is_ascii_alphabetic())
            && !index.is_empty()
            && index.chars().all(|c| c.is_ascii_digit())
    })
}

#[cfg(test)]
mod tests {
    use super::is_simple_token;

    #[test]
    fn simple_tokens_are_told_from_jwts() {
        assert!(is_simple_token("nBqGHxWJdVPwXUSk.42"));
        // A JWT member's login replicated to a simple-token member: the empty prefix.
        assert!(is_simple_token(".42"));
        assert!(!is_simple_token(
            "eyJhbGciOiJFUzI1NiJ9.eyJ1c2VybmFtZSI6InJvb3QifQ.c2ln"
        ));
        assert!(!is_simple_token("nBqGHxWJdVPwXUSk"));
        assert!(!is_simple_token("nBqGHxWJdVPwXUSk."));
    }
}

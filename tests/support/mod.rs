//! Processes the adapter tests start on loopback, each stopped by PID when dropped.

#![allow(dead_code)]

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct Proc {
    pub child: Child,
    pub name: String,
}

impl Proc {
    pub fn spawn(name: &str, cmd: &mut Command, log: &Path) -> Proc {
        let out = std::fs::File::create(log).unwrap();
        let child = cmd
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {name}: {e}"));
        Proc {
            child,
            name: name.to_string(),
        }
    }

    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The etcd under test: `ETCD_BIN` (the Makefile sets it per etcd version), else `etcd` on PATH.
pub fn etcd_bin() -> String {
    std::env::var("ETCD_BIN")
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "etcd".into())
}

/// A loopback port free now, for a process started next. Taken below Linux's ephemeral range
/// (`net.ipv4.ip_local_port_range`, 32768-60999 by default), from which the kernel also picks
/// the local port of every outgoing connection: one of those could take a port probed there
/// before etcd binds it (an adapter run once saw a fresh etcd never answer).
pub fn free_port() -> u16 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let seed = u64::from(std::process::id()).wrapping_mul(2_654_435_761);
    for _ in 0..2_000 {
        let n = seed.wrapping_add(NEXT.fetch_add(7_919, Ordering::Relaxed));
        let port = 20_000 + (n % 12_000) as u16;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub fn wait_until<T>(what: &str, timeout: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let end = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < end, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// One etcd 3.4 member on 127.0.0.1 with ports of its own.
pub struct Etcd {
    pub name: String,
    pub peer_url: String,
    pub client_url: String,
    /// What it tells the cluster its client URL is (default: `client_url`).
    pub advertised_client_url: String,
    proc: Option<Proc>,
    pub dir: PathBuf,
}

impl Etcd {
    pub fn new(name: &str, root: &Path) -> Etcd {
        let client_url = format!("http://127.0.0.1:{}", free_port());
        Etcd {
            name: name.to_string(),
            peer_url: format!("http://127.0.0.1:{}", free_port()),
            advertised_client_url: client_url.clone(),
            client_url,
            proc: None,
            dir: root.join(name),
        }
    }

    /// `initial_cluster` as etcd wants it; `state` is "new" or "existing".
    pub fn start(&mut self, initial_cluster: &str, state: &str) {
        let mut cmd = Command::new(etcd_bin());
        cmd.env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .args(["--name", &self.name])
            .args(["--data-dir", self.dir.to_str().unwrap()])
            .args(["--listen-peer-urls", &self.peer_url])
            .args(["--initial-advertise-peer-urls", &self.peer_url])
            .args(["--listen-client-urls", &self.client_url])
            .args(["--advertise-client-urls", &self.advertised_client_url])
            .args(["--initial-cluster", initial_cluster])
            .args(["--initial-cluster-state", state])
            .args(["--initial-cluster-token", "adapter-test"]);
        let log = self.dir.with_extension("log");
        self.proc = Some(Proc::spawn(&self.name, &mut cmd, &log));
    }

    pub fn kill(&mut self) {
        if let Some(mut p) = self.proc.take() {
            p.kill();
        }
    }
}

/// moto server with the project's lifecycle extension (sim/moto_lifecycle.py).
pub struct Moto {
    pub endpoint: String,
    _proc: Proc,
}

impl Moto {
    pub fn start(dir: &Path) -> Moto {
        let port_file = dir.join("moto.port");
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("sim/moto_lifecycle.py");
        let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
        let mut cmd = Command::new(python);
        cmd.arg(script).arg("--port-file").arg(&port_file);
        let proc = Proc::spawn("moto", &mut cmd, &dir.join("moto.log"));
        let port = wait_until("moto to listen", Duration::from_secs(60), || {
            std::fs::read_to_string(&port_file).ok()
        });
        Moto {
            endpoint: format!("http://127.0.0.1:{}", port.trim()),
            _proc: proc,
        }
    }

    /// Sets the fault layer in front of the emulator (sim/faults.py): its rules and settings.
    pub async fn faults(&self, spec: serde_json::Value) {
        let answer = reqwest::Client::new()
            .post(format!("{}/_sim/faults", self.endpoint))
            .json(&spec)
            .send()
            .await
            .unwrap();
        assert!(answer.status().is_success(), "{answer:?}");
    }

    /// What the fault layer did since last asked: `service.Action.fault` → count.
    pub async fn faults_done(&self) -> serde_json::Value {
        let r = reqwest::get(format!("{}/_sim/faults?clear=1", self.endpoint));
        r.await.unwrap().json::<serde_json::Value>().await.unwrap()["faults"].clone()
    }
}

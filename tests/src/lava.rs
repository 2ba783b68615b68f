//! A LAVA instance on this machine for the tests that submit jobs (`lava-submit`,
//! `reproduce --lava`, the LAVA guide's recipes): Debian's lava-server and lava-dispatcher's
//! worker (`cargo make setup --lava`).

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A LAVA instance on this machine for one test (Debian's lava-server, lava-dispatcher's
/// worker, a `qemu` device): PostgreSQL started if it was down, the server (gunicorn), the
/// scheduler and a worker started here and stopped on drop, with their logs in `dir`.
pub struct LocalLava {
    children: Vec<std::process::Child>,
    postgres: Option<String>,
    pub url: String,
    pub token: String,
    /// The server's, the scheduler's and the worker's logs.
    pub dir: tempfile::TempDir,
}

pub const LAVA_USER: &str = "binder-lab-test";
const LAVA_WORKER: &str = "binder-lab-test-worker";
const LAVA_DEVICE: &str = "binder-lab-test-qemu";

fn manage(args: &[&str]) -> std::process::Output {
    Command::new("lava-server").arg("manage").args(args).output().expect("lava-server (cargo make setup --lava)")
}

impl LocalLava {
    pub fn start() -> LocalLava {
        let postgres = lab::provision::postgres::start_cluster().unwrap();
        // The database outlives the test: each step tolerates what an earlier run made.
        manage(&["users", "add", LAVA_USER, "--superuser", "--staff", "--passwd", LAVA_USER]);
        let token = String::from_utf8_lossy(&manage(&["tokens", "add", "--user", LAVA_USER]).stdout).trim().to_string();
        assert!(!token.is_empty(), "lava-server manage tokens add printed no token");
        manage(&["workers", "add", LAVA_WORKER]);
        let details = String::from_utf8_lossy(&manage(&["workers", "details", LAVA_WORKER]).stdout).into_owned();
        let worker_token = details
            .lines()
            .find_map(|l| l.strip_prefix("token").map(|t| t.trim_start_matches([' ', ':']).trim().to_string()))
            .unwrap_or_else(|| panic!("no worker token in {details}"));
        manage(&["device-types", "add", "qemu"]);
        manage(&["devices", "add", "--device-type", "qemu", "--worker", LAVA_WORKER, LAVA_DEVICE]);
        manage(&["devices", "update", "--health", "GOOD", LAVA_DEVICE]);
        std::fs::write(
            format!("/etc/lava-server/dispatcher-config/devices/{LAVA_DEVICE}.jinja2"),
            lab::harness::lava::DEVICE_DICT,
        )
        .unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let url = format!("http://127.0.0.1:{port}");
        let dir = tempfile::tempdir().unwrap();
        let logs = dir.path().to_path_buf();
        let log = |n: &str| logs.join(n).display().to_string();
        let spawn = |argv: &[String]| {
            Command::new(&argv[0]).args(&argv[1..]).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap()
        };
        let s = |v: &[&str]| v.iter().map(|a| a.to_string()).collect::<Vec<_>>();
        // Built before the first process starts, so a failure below still stops what started.
        let mut lava = LocalLava { children: vec![], postgres, url, token, dir };
        let bind = format!("127.0.0.1:{port}");
        lava.children.push(spawn(&s(&[
            "gunicorn3",
            "lava_server.wsgi",
            "--bind",
            &bind,
            "--workers",
            "2",
            "--worker-class",
            "eventlet",
            "--log-file",
            &log("gunicorn.log"),
        ])));
        lava.children.push(spawn(&s(&[
            "lava-server",
            "manage",
            "lava-scheduler",
            "--log-file",
            &log("scheduler.log"),
        ])));
        let t0 = Instant::now();
        while std::net::TcpStream::connect(&bind).is_err() {
            assert!(t0.elapsed() < Duration::from_secs(60), "the LAVA server did not listen on {bind} within 60 s");
            std::thread::sleep(Duration::from_millis(500));
        }
        let worker_url = format!("{}/", lava.url);
        lava.children.push(spawn(&s(&[
            "lava-worker",
            "--name",
            LAVA_WORKER,
            "--url",
            &worker_url,
            "--token",
            &worker_token,
            "--worker-dir",
            &log("worker"),
            "--log-file",
            &log("worker.log"),
        ])));
        lava
    }
}

impl LocalLava {
    /// The three logs, for a failing test's message.
    pub fn logs(&self) -> String {
        ["gunicorn.log", "scheduler.log", "worker.log"]
            .map(|n| format!("{n}:\n{}", std::fs::read_to_string(self.dir.path().join(n)).unwrap_or_default()))
            .join("\n")
    }
}

impl Drop for LocalLava {
    fn drop(&mut self) {
        for c in self.children.iter_mut().rev() {
            // SIGTERM: gunicorn's master then stops its workers, lava-worker its job.
            unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
            let _ = c.wait();
        }
        if let Some(pg) = &self.postgres {
            let _ = lab::provision::postgres::stop_cluster(pg);
        }
    }
}

//! A daemon connection fed arbitrary bytes after a valid `initialize`: the connection's task
//! never panics, and it ends once the client closes its side.
#![no_main]

use std::sync::LazyLock;
use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use soba::daemon::paths::Paths;
use soba::daemon::registry::{Daemon, DaemonOptions};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

static RUNTIME: LazyLock<tokio::runtime::Runtime> = LazyLock::new(|| {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime")
});

fn frame(body: &str) -> Vec<u8> {
    format!("Content-Length: {}\r\n\r\n{body}", body.len()).into_bytes()
}

fuzz_target!(|data: &[u8]| {
    let base = tempfile::tempdir().expect("temp dir");
    let daemon = Daemon::new(
        Paths::under(base.path()),
        DaemonOptions {
            watch: None,
            extra_config: None,
            summarizer: None,
            ..DaemonOptions::default()
        },
    );
    RUNTIME.block_on(async {
        let (client, server) = tokio::io::duplex(1 << 16);
        let (sr, sw) = tokio::io::split(server);
        let connection = tokio::spawn(soba::daemon::server::serve_connection(daemon, sr, sw));
        let (mut cr, mut cw) = tokio::io::split(client);
        let reader = tokio::spawn(async move {
            let mut out = Vec::new();
            let _ = cr.read_to_end(&mut out).await;
        });
        let init =
            frame(r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"capabilities":{}}}"#);
        let _ = cw.write_all(&init).await;
        let _ = cw
            .write_all(&frame(
                r#"{"jsonrpc":"2.0","method":"initialized","params":{}}"#,
            ))
            .await;
        let _ = cw.write_all(data).await;
        let _ = cw.shutdown().await;
        tokio::time::timeout(Duration::from_secs(10), connection)
            .await
            .expect("the connection ends after the client closes")
            .expect("the connection task does not panic");
        let _ = reader.await;
    });
});

//! The metrics admin endpoint over a real loopback socket: what it answers and its bounds.

use peerblock_node::metrics::{
    serve_metrics, Metrics, MAX_METRICS_HEAD_BYTES, METRICS_CONTENT_TYPE,
};

/// Sends `request` to the endpoint at `addr` and returns the whole answer.
async fn ask(addr: std::net::SocketAddr, request: &[u8]) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(request).await.unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).await.unwrap();
    String::from_utf8(out).unwrap()
}

#[tokio::test]
async fn the_endpoint_answers_get_metrics_with_the_rendered_text() {
    tokio::time::timeout(std::time::Duration::from_secs(10), async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let m = Metrics::new();
        m.connections_accepted.inc();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(serve_metrics(listener, m, async {
            let _ = stopped.await;
        }));
        let answer = ask(addr, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").await;
        assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
        assert!(
            answer.contains(&format!("Content-Type: {METRICS_CONTENT_TYPE}\r\n")),
            "{answer}"
        );
        assert!(
            answer.contains("peerblock_connections_accepted_total 1"),
            "{answer}"
        );
        let (head, body) = answer.split_once("\r\n\r\n").unwrap();
        assert!(
            head.contains(&format!("Content-Length: {}", body.len())),
            "{head}"
        );
        let _ = stop.send(());
        server.await.unwrap().unwrap();
    })
    .await
    .expect("bounded");
}

#[tokio::test]
async fn the_endpoint_answers_404_for_other_paths_and_405_for_other_methods() {
    tokio::time::timeout(std::time::Duration::from_secs(10), async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(serve_metrics(
            listener,
            Metrics::new(),
            std::future::pending(),
        ));
        let answer = ask(addr, b"GET /peer/v1/roster HTTP/1.1\r\n\r\n").await;
        assert!(answer.starts_with("HTTP/1.1 404 "), "{answer}");
        assert!(!answer.contains("peerblock_"), "{answer}");
        let answer = ask(addr, b"POST /metrics HTTP/1.1\r\n\r\n").await;
        assert!(answer.starts_with("HTTP/1.1 405 "), "{answer}");
        server.abort();
    })
    .await
    .expect("bounded");
}

#[tokio::test]
async fn the_endpoint_refuses_a_head_above_its_bound() {
    tokio::time::timeout(std::time::Duration::from_secs(10), async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(serve_metrics(
            listener,
            Metrics::new(),
            std::future::pending(),
        ));
        let mut req = b"GET /metrics HTTP/1.1\r\nX: ".to_vec();
        req.resize(MAX_METRICS_HEAD_BYTES, b'a'); // all read: closing leaves nothing unread to reset the answer away
        let answer = ask(addr, &req).await;
        assert!(answer.starts_with("HTTP/1.1 431 "), "{answer}");
        server.abort();
    })
    .await
    .expect("bounded");
}

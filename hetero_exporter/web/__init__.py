"""The HTTP/1.1 serving both servers share: bounded connections, reads and headers; the web configuration (TLS, basic auth)."""

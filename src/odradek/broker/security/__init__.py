"""Security: TLS (tls.py), authentication and authorization; docs/security.md."""

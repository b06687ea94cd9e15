"""Security: TLS (tls.py), authentication (SASL), the authorizer and its ACLs; docs/security.md."""

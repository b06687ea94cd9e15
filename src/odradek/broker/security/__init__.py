"""Security: authentication (TLS, SASL), the authorizer and its ACLs."""

"""Decoding as §6.1 (and §6.3 for parsing) describes it: the searches, the GNMT penalty and the length limit."""

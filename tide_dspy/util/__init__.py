"""Neutral helpers with no TIDE concepts in them: JSON/YAML files (jsonio), unified diffs (diffs), git (git),
content hashes (hashing), token estimates (tokens), secret scrubbing (secrets), the checkout's paths (paths)
and dict-or-object field access (fields)."""

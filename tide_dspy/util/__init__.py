"""Neutral helpers with no TIDE concepts in them: JSON/YAML files (jsonio), unified diffs (diffs), git (git),
content hashes (hashing), token estimates (tokens), secret scrubbing (secrets) and the checkout's paths (paths)."""

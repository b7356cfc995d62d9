"""Test machinery that exercises real code paths: a local simulator of the hosted providers' APIs."""

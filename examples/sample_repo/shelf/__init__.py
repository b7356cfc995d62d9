"""shelf: a tiny lending-library toolkit, written as a sample input for `tide discover repo`."""

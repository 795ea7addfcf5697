"""What every app's API reads and answers with: strict fields and query strings,
URL parameters, JSON bodies, the one list shape, and the OpenAPI pieces."""

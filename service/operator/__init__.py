"""What operators see beyond the JSON resources: the namespace overview, the review
queue, bulk curation and the retrieval log (used by the web UI under /ui)."""

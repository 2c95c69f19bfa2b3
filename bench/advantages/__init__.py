"""bench.advantages: shaped advantages and teacher scoring, over HTTP and in process."""

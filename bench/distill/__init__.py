"""bench.distill: teacher contexts and dataset export, over HTTP and their raw floors."""

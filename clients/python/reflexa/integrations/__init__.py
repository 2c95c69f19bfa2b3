"""Files a trainer loads by path (OpenRLHF's ``--remote_rm_url /path/to/file.py``)."""

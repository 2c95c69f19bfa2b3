"""The operator web UI: server-rendered pages under /ui over the same services as
the JSON API (docs/ui.md)."""

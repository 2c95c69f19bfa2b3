"""The Reflexa HTTP service: app factory, settings, auth, and one package per domain
(router = thin HTTP edge, schemas = pydantic, service = logic without FastAPI)."""

"""The UI's page routes, one module per area; each stays thin: read the request,
call a service, render a template."""

"""The ingest API: devices -> validate -> stamp -> partition -> durable publish."""

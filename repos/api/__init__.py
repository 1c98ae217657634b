"""The REST API (/api/v1/): DRF views, serializers, authentication, error handling."""

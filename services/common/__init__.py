"""Runtime shared by every Étude service: settings, logging, gRPC, the work queue."""

"""Generated gRPC stubs of the etude.api.v1 contract. DO NOT EDIT: run `make proto`."""

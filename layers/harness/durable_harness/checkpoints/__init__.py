"""The checkpoint store apart from any store (D14): :mod:`.records` the record format every store
keeps a run in, :mod:`.base` the contract the memory, SQLite and DynamoDB/S3 stores share."""

"""The protocol on disk: layout, markers, journal, the store, workspaces, transactions, runners."""

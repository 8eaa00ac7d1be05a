"""The transcript payload (§13.1): its messages and parts (``model``) and its
strict JSON codec (``codec``), shared by the client's transcript helpers
(``runstore.client.transcript``) and the server's console, which shows a
transcript record as its messages."""

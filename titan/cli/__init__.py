"""Console entry points (``titan-validate`` ...). Each imports only what its path needs."""

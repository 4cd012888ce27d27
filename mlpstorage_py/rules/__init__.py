"""The rules as data: editions, allowlists and the hashes and gates derived from them."""

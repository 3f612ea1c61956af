// Package kvindex computes chained block hashes and keeps the prefix index:
// which workers hold which KV blocks. It imports only the standard library.
//
// Hashing: a block's hash covers its tokens and its parent's hash, so equal
// hashes mean equal prefixes. A request's cache_salt seeds the chain.
package kvindex

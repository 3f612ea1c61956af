// Package kvindex computes chained block hashes and keeps the prefix index:
// which workers hold which KV blocks. It imports only the standard library.
//
// Hashing: a block's hash covers its tokens and its parent's hash, so equal
// hashes mean equal prefixes. A request's cache_salt seeds the chain.
//
// Tiers: every (block, worker) entry records the tiers the worker holds the
// block in (GPU, CPU, disk), and a lookup reports each worker's overlap
// split by the fastest tier of each block. A worker's overlap counts the
// leading blocks it holds in any tier; what a lower-tier block is worth is
// the router's business.
package kvindex

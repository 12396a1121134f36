package web

import "hash/fnv"

// priceCents is internal/pod's pricing: 100 + fnv32a(sku) mod 99900.
func priceCents(sku string) int64 {
	h := fnv.New32a()
	h.Write([]byte(sku))
	return 100 + int64(h.Sum32()%99900)
}

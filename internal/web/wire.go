package web

import "hash/fnv"

// Quote is the JSON reply of GET /v1/price and of each WebSocket message.
type Quote struct {
	// ID echoes WatchRequest.ID on the WebSocket; absent over plain HTTP.
	ID int64 `json:"id,omitempty"`
	// Pod, PodIP and Namespace name the pod that answered.
	Pod       string `json:"pod"`
	PodIP     string `json:"podIp"`
	Namespace string `json:"namespace,omitempty"`
	SKU       string `json:"sku"`
	// PriceCents is a stable function of SKU, the same on every pod and
	// the same as internal/pod's gRPC GetPrice.
	PriceCents int64 `json:"priceCents"`
}

// WatchRequest is one client message on /v1/watch.
type WatchRequest struct {
	// ID is the client's number for the message, echoed in the reply.
	ID  int64  `json:"id"`
	SKU string `json:"sku"`
}

// errorReply is the JSON body of every error status.
type errorReply struct {
	Error string `json:"error"`
	Pod   string `json:"pod"`
	PodIP string `json:"podIp"`
}

// priceCents is internal/pod's pricing: 100 + fnv32a(sku) mod 99900.
func priceCents(sku string) int64 {
	h := fnv.New32a()
	h.Write([]byte(sku))
	return 100 + int64(h.Sum32()%99900)
}

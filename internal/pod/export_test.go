package pod

// PriceCents exports priceCents to the external tests of WebServer.
var PriceCents = priceCents

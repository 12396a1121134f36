package cli

// DefaultUIAddr is where lab run --ui serves its dashboard: a free port on
// 127.0.0.1.
const DefaultUIAddr = "127.0.0.1:0"

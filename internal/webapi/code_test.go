package webapi

import (
	"fmt"
	"testing"

	"google.golang.org/grpc/codes"
)

func TestCodeOf(t *testing.T) {
	tests := []struct {
		status int
		want   codes.Code
	}{
		{200, codes.OK}, {204, codes.OK}, {101, codes.Unknown}, {302, codes.Unknown},
		{400, codes.InvalidArgument}, {401, codes.Unauthenticated}, {403, codes.PermissionDenied},
		{404, codes.NotFound}, {405, codes.FailedPrecondition}, {408, codes.DeadlineExceeded},
		{409, codes.Aborted}, {416, codes.OutOfRange}, {426, codes.FailedPrecondition},
		{429, codes.ResourceExhausted}, {499, codes.Canceled}, {500, codes.Internal},
		{501, codes.Unimplemented}, {502, codes.Unavailable}, {503, codes.Unavailable},
		{504, codes.DeadlineExceeded}, {505, codes.Unknown}, {0, codes.Unknown}, {999, codes.Unknown},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.status), func(t *testing.T) {
			if got := CodeOf(tt.status); got != tt.want {
				t.Errorf("CodeOf(%d) = %v, want %v", tt.status, got, tt.want)
			}
		})
	}
}

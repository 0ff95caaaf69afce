package gce

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"strings"
	"testing"

	"github.com/proxyfleet/proxy-operator/pkg/provider"
	"github.com/proxyfleet/proxy-operator/pkg/provider/gce/compute"
)

func googleErr(code int, reasons ...string) error {
	return &compute.Error{Code: code, Message: "message from Google", Reasons: reasons}
}

func opErr(httpStatus int, codes ...string) error {
	op := &compute.Operation{Name: "operation-1", HttpErrorStatusCode: int64(httpStatus), Error: &compute.OperationError{}}
	for _, c := range codes {
		op.Error.Errors = append(op.Error.Errors, &compute.OperationErrorErrors{Code: c, Message: "detail"})
	}
	return newOperationError(op)
}

func TestClassify(t *testing.T) {
	tests := map[string]struct {
		err  error
		want error
	}{
		// quota: retry on a slow, fixed schedule
		"403 quotaExceeded":                 {googleErr(403, "quotaExceeded"), provider.ErrQuotaExceeded},
		"403 rateLimitExceeded":             {googleErr(403, "rateLimitExceeded"), provider.ErrQuotaExceeded},
		"403 userRateLimitExceeded":         {googleErr(403, "userRateLimitExceeded"), provider.ErrQuotaExceeded},
		"429 without reason":                {googleErr(429), provider.ErrQuotaExceeded},
		"429 RESOURCE_EXHAUSTED":            {googleErr(429, "RESOURCE_EXHAUSTED"), provider.ErrQuotaExceeded},
		"503 ZONE_RESOURCE_POOL_EXHAUSTED":  {googleErr(503, "ZONE_RESOURCE_POOL_EXHAUSTED"), provider.ErrQuotaExceeded},
		"operation QUOTA_EXCEEDED":          {opErr(403, "QUOTA_EXCEEDED"), provider.ErrQuotaExceeded},
		"operation pool exhausted":          {opErr(503, "ZONE_RESOURCE_POOL_EXHAUSTED"), provider.ErrQuotaExceeded},
		"operation pool exhausted, details": {opErr(503, "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS"), provider.ErrQuotaExceeded},
		"operation region pool exhausted":   {opErr(0, "REGION_RESOURCE_POOL_EXHAUSTED"), provider.ErrQuotaExceeded},
		"operation rate exceeded":           {opErr(403, "RESOURCE_OPERATION_RATE_EXCEEDED"), provider.ErrQuotaExceeded},
		"quota among other reasons":         {googleErr(400, "invalid", "quotaExceeded"), provider.ErrQuotaExceeded},
		"wrapped":                           {fmt.Errorf("inserting VM: %w", googleErr(403, "quotaExceeded")), provider.ErrQuotaExceeded},

		// permanent: the same request cannot succeed
		"400 invalid":                      {googleErr(400, "invalid"), provider.ErrPermanent},
		"400 badRequest":                   {googleErr(400, "badRequest"), provider.ErrPermanent},
		"400 required":                     {googleErr(400, "required"), provider.ErrPermanent},
		"404 image or machine type":        {googleErr(404, "notFound"), provider.ErrPermanent},
		"403 forbidden":                    {googleErr(403, "forbidden"), provider.ErrPermanent},
		"403 insufficientPermissions":      {googleErr(403, "insufficientPermissions"), provider.ErrPermanent},
		"403 accessNotConfigured":          {googleErr(403, "accessNotConfigured"), provider.ErrPermanent},
		"403 without reason":               {googleErr(403), provider.ErrPermanent},
		"401 bad credentials":              {googleErr(401, "authError"), provider.ErrPermanent},
		"operation RESOURCE_NOT_FOUND":     {opErr(404, "RESOURCE_NOT_FOUND"), provider.ErrPermanent},
		"operation INVALID_FIELD_VALUE":    {opErr(400, "INVALID_FIELD_VALUE"), provider.ErrPermanent},
		"operation without HTTP, notFound": {opErr(0, "RESOURCE_NOT_FOUND"), provider.ErrPermanent},

		// transient: back off and retry
		"400 resourceNotReady":       {googleErr(400, "resourceNotReady"), provider.ErrTransient},
		"409 resourceInUse":          {googleErr(409, "resourceInUseByAnotherResource"), provider.ErrTransient},
		"412 conditionNotMet":        {googleErr(412, "conditionNotMet"), provider.ErrTransient},
		"500 internalError":          {googleErr(500, "internalError"), provider.ErrTransient},
		"502 without reason":         {googleErr(502), provider.ErrTransient},
		"503 backendError":           {googleErr(503, "backendError"), provider.ErrTransient},
		"operation internal error":   {opErr(500, "INTERNAL_ERROR"), provider.ErrTransient},
		"operation unknown, no HTTP": {opErr(0, "SOMETHING_NEW"), provider.ErrTransient},
		"connection reset":           {&url.Error{Op: "Post", URL: "https://compute.googleapis.com/", Err: &net.OpError{Op: "read", Err: errors.New("connection reset by peer")}}, provider.ErrTransient},
		"unexpected EOF":             {&url.Error{Op: "Get", URL: "https://compute.googleapis.com/", Err: io.ErrUnexpectedEOF}, provider.ErrTransient},
		"deadline":                   {context.DeadlineExceeded, provider.ErrTransient},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := classify(tc.err)
			if class := provider.Class(got); class != tc.want {
				t.Errorf("class = %v, want %v", class, tc.want)
			}
			if !errors.Is(got, tc.err) {
				t.Error("the classified error does not wrap the original")
			}
		})
	}
}

func TestClassifyNil(t *testing.T) {
	if err := classify(nil); err != nil {
		t.Errorf("classify(nil) = %v", err)
	}
}

func TestOperationErrorMessage(t *testing.T) {
	err := opErr(503, "ZONE_RESOURCE_POOL_EXHAUSTED")
	if msg := err.Error(); !strings.Contains(msg, "operation-1") || !strings.Contains(msg, "ZONE_RESOURCE_POOL_EXHAUSTED: detail") {
		t.Errorf("message %q does not name the operation and its error", msg)
	}
	if newOperationError(&compute.Operation{Name: "ok", Status: "DONE"}) != nil {
		t.Error("an operation without errors is an error")
	}
}

func TestRedact(t *testing.T) {
	secret := []byte("#cloud-config\npassword: hunter22\n")
	tests := map[string]struct {
		err      error
		secret   []byte
		wantMsg  string
		wantSame bool
	}{
		"echoed":         {err: fmt.Errorf("invalid value '%s'", secret), secret: secret, wantMsg: "invalid value '[user-data redacted]'"},
		"echoed, quoted": {err: fmt.Errorf("invalid value %q", "x"+string(secret)), secret: secret, wantMsg: `invalid value "x[user-data redacted]"`},
		"not echoed":     {err: errors.New("quota"), secret: secret, wantSame: true},
		"short secret":   {err: errors.New("abc"), secret: []byte("abc"), wantSame: true},
		"nil":            {err: nil, secret: secret, wantSame: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := redact(tc.err, tc.secret, "")
			if tc.wantSame {
				if got != tc.err {
					t.Errorf("redact changed %v into %v", tc.err, got)
				}
				return
			}
			if got.Error() != tc.wantMsg {
				t.Errorf("message = %q, want %q", got.Error(), tc.wantMsg)
			}
			if !errors.Is(got, tc.err) {
				t.Error("the redacted error lost its chain")
			}
		})
	}
}

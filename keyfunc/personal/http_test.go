package personal_test

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/ratekit/ratekit/keyfunc"
	"github.com/ratekit/ratekit/keyfunc/personal"
)

// bigBody is a body of size bytes generated on the fly that counts what
// is read.
type bigBody struct {
	size, read int64
	closed     bool
}

func (b *bigBody) Read(p []byte) (int, error) {
	if b.read >= b.size {
		return 0, io.EOF
	}
	n := min(int64(len(p)), b.size-b.read)
	for i := range p[:n] {
		p[i] = 'x'
	}
	b.read += n
	return int(n), nil
}

func (b *bigBody) Close() error { b.closed = true; return nil }

// TestPhoneHugeBody checks that Phone reads at most DefaultMaxBody+1 bytes
// of a 10 MB body, fast, and leaves all of it to the handler.
func TestPhoneHugeBody(t *testing.T) {
	t.Parallel()
	const size = 10 << 20
	for _, chunked := range []bool{false, true} {
		name := "content-length"
		if chunked {
			name = "chunked"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			body := &bigBody{size: size}
			r := httptest.NewRequest("POST", "/sms", nil)
			r.Header.Set("Content-Type", "application/json")
			r.Body = body
			r.ContentLength = size
			if chunked {
				r.ContentLength = -1
			}
			start := time.Now()
			got, err := personal.Phone(personal.Cleartext(true))(keyfunc.FromHTTP(r, ""))
			elapsed := time.Since(start)
			if !errors.Is(err, keyfunc.ErrInvalidKey) || got != "" {
				t.Fatalf("Phone() = %q, %v; want error wrapping ErrInvalidKey", got, err)
			}
			if body.read > personal.DefaultMaxBody+1 {
				t.Errorf("Phone read %d bytes of the body; want at most %d", body.read, personal.DefaultMaxBody+1)
			}
			if elapsed > time.Second {
				t.Errorf("Phone took %v", elapsed)
			}
			n, err := io.Copy(io.Discard, r.Body)
			if err != nil || n != size {
				t.Errorf("handler reads %d bytes, %v; want %d", n, err, size)
			}
			r.Body.Close()
			if !body.closed {
				t.Errorf("closing the restored body did not close the original")
			}
		})
	}
}

// TestPhoneBodyOverServer runs Phone as middleware on a real server and
// checks that the handler reads the complete body, including one larger
// than MaxBody.
func TestPhoneBodyOverServer(t *testing.T) {
	t.Parallel()
	key := personal.Phone(personal.Cleartext(true), personal.DefaultRegion("CN"), personal.MaxBody(1024))
	type result struct {
		key  string
		err  error
		body []byte
	}
	results := make(chan result, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		k, err := key(keyfunc.FromHTTP(r, ""))
		b, _ := io.ReadAll(r.Body)
		results <- result{k, err, b}
	}))
	defer srv.Close()

	padding := strings.Repeat(" ", 4096)
	tests := []struct {
		name    string
		body    string
		chunked bool
		want    string
		wantErr error
	}{
		{name: "small", body: `{"phone":"+86 138-0013-8000"}`, want: "+8613800138000"},
		{name: "small chunked", body: `{"phone":"13800138000"}`, chunked: true, want: "+8613800138000"},
		{name: "over max", body: `{"phone":"13800138000"}` + padding, wantErr: keyfunc.ErrInvalidKey},
		{name: "over max chunked", body: `{"phone":"13800138000"}` + padding, chunked: true, wantErr: keyfunc.ErrInvalidKey},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var body io.Reader = strings.NewReader(tc.body)
			if tc.chunked {
				body = io.MultiReader(body) // hides the length
			}
			req, err := http.NewRequest("POST", srv.URL, body)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			res := <-results
			if tc.wantErr != nil {
				if !errors.Is(res.err, tc.wantErr) {
					t.Errorf("Phone() = %q, %v; want error %v", res.key, res.err, tc.wantErr)
				}
			} else if res.err != nil || res.key != tc.want {
				t.Errorf("Phone() = %q, %v; want %q", res.key, res.err, tc.want)
			}
			if !bytes.Equal(res.body, []byte(tc.body)) {
				t.Errorf("handler read %d bytes, want the %d sent", len(res.body), len(tc.body))
			}
		})
	}
}

// noBody is a Request whose body cannot be read before the handler, as
// with gRPC: Body returns an error wrapping ErrNoKey.
type noBody struct{ keyfunc.Request }

func (noBody) Body(int64) ([]byte, error) {
	return nil, errors.New("no body before the handler: " + keyfunc.ErrNoKey.Error())
}

type noBodyWrapped struct{ keyfunc.Request }

var errNoBody = errors.Join(errors.New("no body before the handler"), keyfunc.ErrNoKey)

func (noBodyWrapped) Body(int64) ([]byte, error) { return nil, errNoBody }

// TestBodyUnavailable checks that a request that cannot provide its body
// (gRPC) is read as one without a body: later sources are still tried.
func TestBodyUnavailable(t *testing.T) {
	t.Parallel()
	f := personal.Phone(personal.Cleartext(true), personal.Field("phone"), personal.Header("X-Phone"), personal.DefaultRegion("CN"))
	r := noBodyWrapped{header(t, "X-Phone", "13800138000")}
	if got, err := f(r); err != nil || got != "+8613800138000" {
		t.Errorf("Phone() = %q, %v; want %q", got, err, "+8613800138000")
	}
	if got, err := f(noBodyWrapped{header(t, "X-Other", "x")}); !errors.Is(err, keyfunc.ErrNoKey) {
		t.Errorf("Phone() = %q, %v; want ErrNoKey", got, err)
	}
	// Any other Body error is passed on.
	if got, err := f(noBody{header(t, "X-Phone", "13800138000")}); err == nil || errors.Is(err, keyfunc.ErrNoKey) {
		t.Errorf("Phone() = %q, %v; want the Body error", got, err)
	}
}

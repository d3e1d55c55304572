package personal_test

import (
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/ratekit/ratekit/keyfunc"
	"github.com/ratekit/ratekit/keyfunc/personal"
)

// fuzzRequest is the request FuzzPhone and FuzzAccount send: body with
// Content-Type ctype, the query parameter field=query and the header
// X-Value: header.
func fuzzRequest(field, ctype, body, query, header string) *http.Request {
	return &http.Request{
		Method:        "POST",
		URL:           &url.URL{Path: "/", RawQuery: field + "=" + url.QueryEscape(query)},
		Header:        http.Header{"Content-Type": {ctype}, "X-Value": {header}},
		Body:          io.NopCloser(strings.NewReader(body)),
		ContentLength: int64(len(body)),
		RemoteAddr:    "192.0.2.1:1",
	}
}

// checkFuzzResult checks what every key function call must give: a key
// and no error, or no key and ErrNoKey or an error wrapping ErrInvalidKey
// with a short message and a reason; and the whole body left to the
// handler.
func checkFuzzResult(t *testing.T, r *http.Request, body, k string, err error) {
	t.Helper()
	switch {
	case err == nil:
	case errors.Is(err, keyfunc.ErrNoKey) || errors.Is(err, keyfunc.ErrInvalidKey):
		if k != "" {
			t.Fatalf("key = %q with error %v", k, err)
		}
		if len(err.Error()) > 200 {
			t.Fatalf("error message is %d bytes long: %.200q", len(err.Error()), err)
		}
		if errors.Is(err, keyfunc.ErrInvalidKey) && keyfunc.Reason(err) == "" {
			t.Fatalf("error %v has no reason", err)
		}
	default:
		t.Fatalf("unexpected error %v", err)
	}
	rest, err := io.ReadAll(r.Body)
	if err != nil || string(rest) != body {
		t.Fatalf("handler reads %d bytes, %v; want the %d sent", len(rest), err, len(body))
	}
}

func FuzzPhone(f *testing.F) {
	f.Add("application/json", `{"phone":"+86 138-0013-8000"}`, "", "")
	f.Add("application/json", `{"PHONE":8613800138000,"phone":null}`, "", "")
	f.Add("application/x-www-form-urlencoded", "phone=13800138000&x=%zz", "", "")
	f.Add("application/x-www-form-urlencoded", "PHONE=13800138000&Phone=+1 202-555-0143", "", "")
	f.Add("application/x-www-form-urlencoded", `{"phone":"13800138000"}&phone=1`, "", "")
	f.Add("", `{"phone":["x"]}`, "13800138000", "")
	f.Add("text/plain", "\xff\xfe", "", "+1 202-555-0143")
	f.Add("multipart/form-data; boundary=x", "--x", "", "")
	f.Add("0", "0", "00", "") // IDD without a number: the longest phonenumbers error
	f.Add("application/json", `{"phone":"`+strings.Repeat("1", 300)+`"}`, "", "")

	key := personal.Phone(personal.Cleartext(true), personal.Field("phone"), personal.Header("X-Value"),
		personal.DefaultRegion("CN"), personal.MaxBody(4096))
	f.Fuzz(func(t *testing.T, ctype, body, query, header string) {
		r := fuzzRequest("phone", ctype, body, query, header)
		k, err := key(keyfunc.FromHTTP(r, ""))
		checkFuzzResult(t, r, body, k, err)
		if err != nil {
			return
		}
		if len(k) < 3 || k[0] != '+' || strings.Trim(k[1:], "0123456789") != "" {
			t.Fatalf("Phone = %q, not E.164", k)
		}
		// The key is a fixed point: normalising it again gives itself.
		if k2, err := personal.PhoneKey(k, personal.Cleartext(true)); err != nil || k2 != k {
			t.Fatalf("PhoneKey(%q) = %q, %v; want itself", k, k2, err)
		}
	})
}

func FuzzAccount(f *testing.F) {
	f.Add("application/json", `{"username":"Alice@Example.COM"}`, "", "")
	f.Add("application/json", `{"email":"ａｌｉｃｅ"}`, "alice", "")
	f.Add("application/x-www-form-urlencoded", "USERNAME=%E2%84%AA&username=k", "", "")
	f.Add("text/plain", `{"username":1e3}`, "", "bob")
	f.Add("", "username=x", "", "\xff")

	key := personal.Account(personal.Cleartext(true), personal.Field("username"), personal.Field("email"),
		personal.Header("X-Value"), personal.MaxBody(4096))
	f.Fuzz(func(t *testing.T, ctype, body, query, header string) {
		r := fuzzRequest("username", ctype, body, query, header)
		k, err := key(keyfunc.FromHTTP(r, ""))
		checkFuzzResult(t, r, body, k, err)
		if err != nil {
			return
		}
		if k == "" {
			t.Fatalf("Account = %q", k)
		}
		// The key is a fixed point: normalising it again gives itself.
		if k2, err := personal.AccountKey(k, personal.Cleartext(true)); err != nil || k2 != k {
			t.Fatalf("AccountKey(%q) = %q, %v; want itself", k, k2, err)
		}
	})
}

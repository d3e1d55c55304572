package personal_test

import (
	"testing"

	"github.com/ratekit/ratekit/keyfunc"
	"github.com/ratekit/ratekit/keyfunc/personal"
)

// The tests in this file pin the fix for limits being bypassed when the
// value is where the handler looks but the key function does not: the key
// function returned ErrNoKey and the default no-key policy let the request
// through unlimited.

const (
	jsonType = "application/json"
	formType = "application/x-www-form-urlencoded"
)

// TestJSONBodyWhateverContentType: handlers that json.NewDecoder(r.Body)
// ignore the Content-Type, so a JSON object body is read whatever its
// label, a form type included.
func TestJSONBodyWhateverContentType(t *testing.T) {
	t.Parallel()
	phone := personal.Phone(personal.Cleartext(true), personal.DefaultRegion("CN"))
	account := personal.Account(personal.Cleartext(true))
	tests := []struct {
		name string
		f    keyfunc.Func
		req  req
		want want
	}{
		{"phone form label", phone, req{ctype: formType, body: `{"phone":"13800138000"}`}, want{key: "+8613800138000"}},
		{"phone form label with charset", phone, req{ctype: formType + "; charset=utf-8", body: ` {"phone":"13800138000"}`}, want{key: "+8613800138000"}},
		{"phone text/plain", phone, req{ctype: "text/plain", body: `{"phone":"13800138000"}`}, want{key: "+8613800138000"}},
		{"phone octet-stream", phone, req{ctype: "application/octet-stream", body: `{"phone":"13800138000"}`}, want{key: "+8613800138000"}},
		{"phone no label", phone, req{body: `{"phone":"13800138000"}`}, want{key: "+8613800138000"}},
		{"phone json option form label", personal.Phone(personal.Cleartext(true), personal.JSON("mobile"), personal.DefaultRegion("CN")),
			req{ctype: formType, body: `{"mobile":"13800138000"}`}, want{key: "+8613800138000"}},
		{"account form label", account, req{ctype: formType, body: `{"username":"Alice"}`}, want{key: "alice"}},
		{"account form label email", account, req{ctype: formType, body: `{"email":"Alice@Example.com","password":"x"}`}, want{key: "alice@example.com"}},
		{"account text/plain", account, req{ctype: "text/plain; charset=utf-8", body: `{"username":"Alice"}`}, want{key: "alice"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			check(t, tc.f, tc.req, tc.want)
		})
	}
}

// TestFormFieldAnyCase: echo's binder fills a "phone" field from
// "PHONE=", so form fields match in any case; every field that matches
// must name the same number.
func TestFormFieldAnyCase(t *testing.T) {
	t.Parallel()
	phone := personal.Phone(personal.Cleartext(true), personal.DefaultRegion("CN"))
	account := personal.Account(personal.Cleartext(true))
	conflict := want{err: keyfunc.ErrInvalidKey, reason: "conflicting phone numbers in request"}
	tests := []struct {
		name string
		f    keyfunc.Func
		req  req
		want want
	}{
		{"upper case", phone, req{ctype: formType, body: "PHONE=13800138000"}, want{key: "+8613800138000"}},
		{"mixed case", phone, req{ctype: formType, body: "x=1&Phone=13800138000"}, want{key: "+8613800138000"}},
		{"escaped name", phone, req{ctype: formType, body: "PH%4FNE=13800138000"}, want{key: "+8613800138000"}},
		{"form option", personal.Phone(personal.Cleartext(true), personal.Form("mobile"), personal.DefaultRegion("CN")),
			req{ctype: formType, body: "MOBILE=13800138000"}, want{key: "+8613800138000"}},
		{"account username", account, req{ctype: formType, body: "USERNAME=Alice&password=x"}, want{key: "alice"}},
		{"account email", account, req{ctype: formType, body: "Email=Alice%40example.com&password=x"}, want{key: "alice@example.com"}},
		{"exact name and another spelling", phone, req{ctype: formType, body: "PHONE=%2B12025550143&phone=13800138000"}, conflict},
		{"exact name in query and another spelling", phone, req{target: "/?phone=13800138000", ctype: formType, body: "PHONE=%2B12025550143"}, conflict},
		{"one field repeated", phone, req{ctype: formType, body: "PHONE=13800138000&PHONE=%2B12025550143"}, conflict},
		{"one field repeated, one number", phone, req{ctype: formType, body: "phone=13800138000&phone=%2B86%20138%200013%208000"}, want{key: "+8613800138000"}},
		{"spellings agree", phone, req{ctype: formType, body: "PHONE=13800138000&Phone=13800138000"}, want{key: "+8613800138000"}},
		{"spellings disagree", phone, req{ctype: formType, body: "PHONE=13800138000&Phone=%2B12025550143"}, conflict},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			check(t, tc.f, tc.req, tc.want)
		})
	}
}

// TestQueryIsDefaultSource: gin's ShouldBind reads query parameters on
// POST, so the defaults read the query too.
func TestQueryIsDefaultSource(t *testing.T) {
	t.Parallel()
	phone := personal.Phone(personal.Cleartext(true), personal.DefaultRegion("CN"))
	account := personal.Account(personal.Cleartext(true))
	tests := []struct {
		name string
		f    keyfunc.Func
		req  req
		want want
	}{
		{"phone no body", phone, req{target: "/sms?phone=13800138000"}, want{key: "+8613800138000"}},
		{"account username no body", account, req{target: "/login?username=Alice"}, want{key: "alice"}},
		{"account email no body", account, req{target: "/login?email=Alice%40example.com"}, want{key: "alice@example.com"}},
		{"account username with form body", account, req{target: "/login?username=Alice", ctype: formType, body: "password=x"}, want{key: "alice"}},
		{"account username with json body", account, req{target: "/login?username=Alice", ctype: jsonType, body: `{"password":"x"}`}, want{key: "alice"}},
		{"field option", personal.Account(personal.Cleartext(true), personal.Field("login")), req{target: "/login?login=Alice"}, want{key: "alice"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			check(t, tc.f, tc.req, tc.want)
		})
	}
}

// TestBodyWithoutValueRefused: a non-empty body that holds no value where
// the body sources look, with no value anywhere else, may hold it in a
// shape that is not read; it is refused, not skipped as ErrNoKey.
func TestBodyWithoutValueRefused(t *testing.T) {
	t.Parallel()
	phone := personal.Phone(personal.DefaultRegion("CN"))
	account := personal.Account()
	noNumber := want{err: keyfunc.ErrInvalidKey, reason: "no phone number in request"}
	noName := want{err: keyfunc.ErrInvalidKey, reason: "no account name in request"}
	noKey := want{err: keyfunc.ErrNoKey}
	tests := []struct {
		name string
		f    keyfunc.Func
		req  req
		want want
	}{
		{"phone text body", phone, req{ctype: "text/plain", body: "phone=13800138000"}, noNumber},
		{"phone unlabelled form", phone, req{body: "phone=13800138000"}, noNumber},
		{"phone xml", phone, req{ctype: "application/xml", body: "<r><phone>13800138000</phone></r>"}, noNumber},
		{"phone json without the field", phone, req{ctype: jsonType, body: `{"mobile":"13800138000"}`}, noNumber},
		{"phone json with null", phone, req{ctype: jsonType, body: `{"phone":null}`}, noNumber},
		{"phone form without the field", phone, req{ctype: formType, body: "mobile=13800138000"}, noNumber},
		{"phone form with empty field", phone, req{ctype: formType, body: "phone=&x=1"}, noNumber},
		{"phone json source form body", personal.Phone(personal.JSON("phone")), req{ctype: formType, body: "phone=13800138000"}, noNumber},
		{"phone multipart", phone, req{ctype: "multipart/form-data; boundary=x", body: "--x\r\nContent-Disposition: form-data; name=\"phone\"\r\n\r\n13800138000\r\n--x--\r\n"},
			want{err: keyfunc.ErrInvalidKey, reason: "unsupported request body"}},
		{"phone multipart with json preamble", phone, req{ctype: "multipart/form-data; boundary=x", body: "{\"phone\":\"13800138000\"}\r\n--x--\r\n"},
			want{err: keyfunc.ErrInvalidKey, reason: "unsupported request body"}},
		{"account text body", account, req{ctype: "text/plain", body: "username=alice"}, noName},
		{"account json without the fields", account, req{ctype: jsonType, body: `{"login":"alice"}`}, noName},
		{"account form without the fields", account, req{ctype: formType, body: "user=alice&password=x"}, noName},

		// A value elsewhere is used; an empty body stays ErrNoKey.
		{"phone text body query", personal.Phone(personal.Cleartext(true), personal.DefaultRegion("CN")), req{target: "/?phone=13800138000", ctype: "text/plain", body: "x"}, want{key: "+8613800138000"}},
		{"phone text body header", personal.Phone(personal.Cleartext(true), personal.Field("phone"), personal.Header("X-Phone"), personal.DefaultRegion("CN")),
			req{ctype: "text/plain", body: "x", headers: []string{"X-Phone", "13800138000"}}, want{key: "+8613800138000"}},
		{"phone empty body", phone, req{ctype: jsonType}, noKey},
		{"phone white space body", phone, req{ctype: formType, body: "\r\n"}, noKey},
		{"account empty body", account, req{}, noKey},
		{"header only", personal.Phone(personal.Header("X-Phone")), req{ctype: "text/plain", body: "phone=13800138000"}, noKey},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			check(t, tc.f, tc.req, tc.want)
		})
	}
}

// TestConflictingSourcesRefused: a JSON decoder sees only the JSON body, a
// form parser the form body and the query, and a handler reads the
// field it was written to read, which may be any of the sources. When two
// sources, two fields or two values of one field name different values
// the request is refused: keying by one lets a handler that reads another
// through.
func TestConflictingSourcesRefused(t *testing.T) {
	t.Parallel()
	phone := personal.Phone(personal.Cleartext(true), personal.DefaultRegion("CN"))
	account := personal.Account(personal.Cleartext(true))
	phoneConflict := want{err: keyfunc.ErrInvalidKey, reason: "conflicting phone numbers in request"}
	accountConflict := want{err: keyfunc.ErrInvalidKey, reason: "conflicting account names in request"}
	tests := []struct {
		name string
		f    keyfunc.Func
		req  req
		want want
	}{
		{"json and query", phone, req{target: "/?phone=%2B12025550143", ctype: jsonType, body: `{"phone":"13800138000"}`}, phoneConflict},
		{"json and invalid query", phone, req{target: "/?phone=nonsense", ctype: jsonType, body: `{"phone":"13800138000"}`}, phoneConflict},
		{"json and query agree", phone, req{target: "/?phone=8613800138000", ctype: jsonType, body: `{"phone":"+86 138 0013 8000"}`}, want{key: "+8613800138000"}},
		{"form-labelled json that reads as a form", phone, req{ctype: formType, body: `{"phone":"13800138000"}&phone=%2B12025550143`}, phoneConflict},
		{"form-labelled json with form field in a string", phone, req{ctype: formType, body: `{"a":"x&phone=%2B12025550143&b=","phone":"13800138000"}`}, phoneConflict},
		{"form-labelled json and query", phone, req{target: "/?phone=%2B12025550143", ctype: formType, body: `{"phone":"13800138000"}`}, phoneConflict},
		{"json email and query username", account, req{target: "/login?username=mallory", ctype: jsonType, body: `{"email":"alice@example.com"}`}, accountConflict},
		{"json username and query email", account, req{target: "/login?email=mallory", ctype: jsonType, body: `{"username":"alice"}`}, accountConflict},
		{"json and query name one account", account, req{target: "/login?username=ALICE", ctype: jsonType, body: `{"username":" Alice "}`}, want{key: "alice"}},
		{"header and both others", personal.Phone(personal.Cleartext(true), personal.Header("X-Phone"), personal.Field("phone"), personal.DefaultRegion("CN")),
			req{target: "/?phone=%2B12025550143", ctype: jsonType, body: `{"phone":"+44 20 7946 0958"}`, headers: []string{"X-Phone", "13800138000"}}, phoneConflict},
		{"header and body agree", personal.Phone(personal.Cleartext(true), personal.Header("X-Phone"), personal.Field("phone"), personal.DefaultRegion("CN")),
			req{ctype: jsonType, body: `{"phone":"+86 138 0013 8000"}`, headers: []string{"X-Phone", "13800138000"}}, want{key: "+8613800138000"}},
		{"header repeated", personal.Phone(personal.Header("X-Phone"), personal.DefaultRegion("CN")),
			req{headers: []string{"X-Phone", "13800138000", "X-Phone", "+12025550143"}}, phoneConflict},

		// Issue 20, item 7: an app that reads one field never sees the
		// other, so the other must not pick the bucket.
		{"json email and username", account, req{ctype: jsonType, body: `{"email":"alice@example.com","username":"x1"}`}, accountConflict},
		{"json username and email", account, req{ctype: jsonType, body: `{"username":"x2","email":"alice@example.com"}`}, accountConflict},
		{"form email and username", account, req{ctype: formType, body: "email=alice%40example.com&username=x1&password=guess"}, accountConflict},
		{"json email and username agree", account, req{ctype: jsonType, body: `{"email":"Alice@example.com","username":"alice@example.com"}`}, want{key: "alice@example.com"}},
		{"json field repeated", phone, req{ctype: jsonType, body: `{"phone":"13800138000","phone":"+12025550143"}`}, phoneConflict},
		{"json field in two cases", phone, req{ctype: jsonType, body: `{"phone":"13800138000","PHONE":"+12025550143"}`}, phoneConflict},
		{"json field null beside a number", phone, req{ctype: jsonType, body: `{"phone":"13800138000","Phone":null}`}, want{key: "+8613800138000"}},
		{"query and form", phone, req{target: "/sms?phone=13800138000", ctype: formType, body: "phone=%2B12025550143"}, phoneConflict},
		{"query repeated", phone, req{target: "/sms?phone=13800138000&phone=%2B12025550143"}, phoneConflict},
		{"query in two cases", phone, req{target: "/sms?phone=13800138000&Phone=%2B12025550143"}, phoneConflict},
		{"query repeated, one number", phone, req{target: "/sms?phone=13800138000&phone=8613800138000"}, want{key: "+8613800138000"}},
		{"query and form agree", phone, req{target: "/sms?phone=13800138000", ctype: formType, body: "phone=%2B8613800138000"}, want{key: "+8613800138000"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			check(t, tc.f, tc.req, tc.want)
		})
	}
}

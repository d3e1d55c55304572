package personal_test

import (
	"errors"
	"fmt"
	"net/http/httptest"
	"strings"

	"github.com/ratekit/ratekit/keyfunc"
	"github.com/ratekit/ratekit/keyfunc/personal"
)

func ExamplePhone() {
	// Cleartext shows the E.164 form; by default the key is its
	// pseudonym, so that the store holds no numbers.
	key := personal.Phone(personal.DefaultRegion("CN"), personal.Cleartext(true))

	for _, body := range []string{
		`{"phone": "+86 138-0013-8000"}`,
		`{"phone": "8613800138000"}`,
		`{"phone": "13800138000"}`,
		`{"phone": "12345"}`,
		`{"email": "someone@example.com"}`,
		``,
	} {
		r := httptest.NewRequest("POST", "/sms", strings.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		k, err := key(keyfunc.FromHTTP(r, ""))
		switch {
		case errors.Is(err, keyfunc.ErrNoKey):
			fmt.Println("no key")
		case err != nil:
			// The reason is a fixed text that may be shown to the client.
			fmt.Println("refused:", keyfunc.Reason(err))
		default:
			fmt.Println(k)
		}
	}
	// Output:
	// +8613800138000
	// +8613800138000
	// +8613800138000
	// refused: invalid phone number
	// refused: no phone number in request
	// no key
}

func ExamplePhone_sources() {
	// The number is in a header, else in the "mobile" query parameter.
	key := personal.Phone(personal.Header("X-Phone"), personal.Query("mobile"),
		personal.DefaultRegion("US"), personal.Cleartext(true))

	r := httptest.NewRequest("POST", "/sms?mobile=%28202%29+555-0143", nil)
	k, _ := key(keyfunc.FromHTTP(r, ""))
	fmt.Println(k)
	// Output:
	// +12025550143
}

func ExamplePhoneKey() {
	// An ops tool names the bucket of a number, to reset its limit; the
	// options are those given to Phone.
	opts := []personal.Option{personal.DefaultRegion("CN"), personal.Secret([]byte("app secret"))}
	key := personal.Phone(opts...)

	k, _ := personal.PhoneKey("138 0013 8000", opts...)
	r := httptest.NewRequest("POST", "/sms", strings.NewReader(`{"phone":"+86 13800138000"}`))
	fromRequest, _ := key(keyfunc.FromHTTP(r, ""))
	fmt.Println(k == fromRequest, strings.HasPrefix(k, personal.PseudonymPrefix), strings.Contains(k, "138"))

	_, err := personal.PhoneKey("12345", opts...)
	fmt.Println(errors.Is(err, keyfunc.ErrInvalidKey))
	// Output:
	// true true false
	// true
}

func ExampleAccount() {
	key := personal.Account(personal.Cleartext(true))
	for _, body := range []string{`{"username":"  Alice@Example.COM "}`, `username=alice%40example.com`} {
		r := httptest.NewRequest("POST", "/login", strings.NewReader(body))
		if body[0] != '{' {
			r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
		k, err := key(keyfunc.FromHTTP(r, ""))
		fmt.Printf("%q %v\n", k, err)
	}
	// Output:
	// "alice@example.com" <nil>
	// "alice@example.com" <nil>
}

func ExampleAccountKey() {
	// After a successful login, the app resets the account's failure
	// count: the key is the one Account gives with the same options.
	secret := personal.Secret([]byte("app secret"))
	k, _ := personal.AccountKey(" Alice@Example.COM", secret)
	fmt.Println(k == personal.Pseudonym([]byte("app secret"), "alice@example.com"))

	// Cleartext(true) gives the normalised name itself.
	name, _ := personal.AccountKey(" Alice@Example.COM", personal.Cleartext(true))
	fmt.Println(name)
	// Output:
	// true
	// alice@example.com
}

func ExamplePseudonym() {
	key := personal.Phone(personal.DefaultRegion("CN"), personal.Secret([]byte("app secret")))
	for _, phone := range []string{"+86 138-0013-8000", "13800138000"} {
		r := httptest.NewRequest("POST", "/sms", strings.NewReader(`{"phone":"`+phone+`"}`))
		k, _ := key(keyfunc.FromHTTP(r, ""))
		fmt.Println(k == personal.Pseudonym([]byte("app secret"), "+8613800138000"), strings.Contains(k, "138"))
	}
	// Output:
	// true false
	// true false
}

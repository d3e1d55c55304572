// Package personal keys rate limits by personal data: [Phone] by a phone
// number, for SMS and verification-code throttling, and [Account] by the
// account a login names, for login anti-bruteforce. Both return a
// [keyfunc.Func] for any ratekit adapter.
//
//	echolimit.New(sms, guard.WithKey(personal.Phone(personal.DefaultRegion("CN"))))
//
// # Pseudonyms
//
// Phone numbers and account names are personal data, so the key is by
// default a [Pseudonym] of the normalised value (the E.164 number, the
// NFKC-normalised, trimmed, case-folded name without invisible,
// default-ignorable code points): an HMAC, so that a dump of
// the store reveals no numbers or names. Set an app secret with [Secret],
// the same on every instance, so that keys cannot be tested against
// guesses either; [Cleartext] turns pseudonyms off. [PhoneKey] and
// [AccountKey] name the key of a given number or name, for ops tools and
// for resetting a limit.
//
// # Where the value is read
//
// A limit keyed by a value that the handler reads from somewhere else is
// no limit: the attacker puts the value where the handler looks and the
// key function does not. So by default the value is read wherever common
// binders look ([Field]): json.NewDecoder(r.Body) and gin's ShouldBindJSON
// read a JSON object body whatever its Content-Type; gin's ShouldBind,
// echo's Bind and [net/http.Request.FormValue] read a form body (echo matching
// field names in any case) and the query. Bodies are read through
// [keyfunc.Request.Body], up to [MaxBody] bytes, and stay readable for the
// handler.
//
// The rules:
//   - A request whose body is empty (or white space) and whose sources
//     hold no value is
//     [keyfunc.ErrNoKey]: the middleware's no-key policy decides.
//   - A request whose body is not empty but holds no value where the body
//     sources look, with no value in any other source either, is refused
//     with an error wrapping [keyfunc.ErrInvalidKey] (reason "no phone
//     number in request" or "no account name in request"): the value may
//     be in the body in a shape this package does not read, and skipping
//     the limit would let it through. Multipart bodies are refused too.
//   - Every source is read, and every value found must name the same
//     number or account once normalised: in two sources (a JSON body and
//     the query, a header and a form), in two fields (Account's
//     "username" and "email"), in a field repeated ("phone=A&phone=B") or
//     spelt in another case ("PHONE="). Otherwise the request is refused
//     with an error wrapping [keyfunc.ErrInvalidKey] (reason "conflicting
//     phone numbers in request" or "conflicting account names in
//     request"): a handler reads the field it was written to read, a
//     JSON decoder only the JSON body, a form parser the form body and
//     the query, so keying by one value would let a handler that acts on
//     another through, in a bucket the client picked.
//
// Messages of these errors never quote the input, and [keyfunc.Reason]
// gives a fixed text that may be shown to the client.
//
// # A separate package
//
// Phone numbers are parsed by github.com/nyaruka/phonenumbers and names
// normalised by golang.org/x/text, both large. They live here, apart from
// package keyfunc, so that only applications that import this package link
// them.
package personal

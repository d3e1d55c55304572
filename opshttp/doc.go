// Package opshttp is an opt-in admin [http.Handler] for support staff: it
// lists the policies of an app's limiters, peeks at a key's windows and
// resets a key (unlocking a user locked out by a login limit).
//
// It has no authentication of its own: mount it behind the app's admin
// authentication, under a prefix stripped with [http.StripPrefix].
//
//	admin := opshttp.Handler([]*core.Limiter{loginLimiter, smsLimiter})
//	mux.Handle("/admin/ratelimit/", requireAdmin(http.StripPrefix("/admin/ratelimit", admin)))
//
// Routes, answering JSON:
//
//	GET    /policies                    every policy: name, algorithm, rules
//	GET    /policies/{name}             one policy
//	GET    /policies/{name}/keys/{key}  what a request of one unit for key would get now (Limiter.Peek)
//	DELETE /policies/{name}/keys/{key}  forget everything recorded for key (Limiter.Reset); 204
//
// The key is one path segment, URL-decoded: escape a '/' in it as %2F. An
// unknown policy is 404. Answers never echo the key or an error's text: a
// store failure is a fixed 503 body, and the error goes to the logger
// given with [WithLogger], without the key.
package opshttp

package rueidisstore

import "time"

// SetWall makes s find calendar periods around wall's time, rather than
// time.Now's, when the server's clock decides: a client whose clock is
// off.
func SetWall(s *Store, wall func() time.Time) { s.wall = wall }

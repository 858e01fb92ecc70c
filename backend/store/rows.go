package store

// Scanner is one row to read: what database/sql's *Row and *Rows and pgx's
// Row and Rows all offer, so that each store scans a record one way.
type Scanner interface {
	Scan(dest ...any) error
}

// Rows is a result set, as database/sql and pgx both give it.
type Rows interface {
	Scanner
	Next() bool
	Err() error
}

// Collect reads every row of rows with scan, in order; the caller closes
// rows and wraps the error with what it was reading. The slice is never nil.
func Collect[T any](rows Rows, scan func(Scanner) (T, error)) ([]T, error) {
	out := []T{}
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

// ScanString reads a row of one text column.
func ScanString(r Scanner) (string, error) {
	var s string
	err := r.Scan(&s)
	return s, err
}

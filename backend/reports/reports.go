// Package reports keeps the report PDFs of completed services under the
// reports directory, one folder per order: generated with go-pdf/fpdf when
// the provider (or staff) gives no file, or written as given.
package reports

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"codeberg.org/go-pdf/fpdf"
	"github.com/google/uuid"

	"vendorgate/shared/wire"
)

// ErrNoFile is returned when a report file is not there.
var ErrNoFile = errors.New("report file not found")

// Info is what a generated report shows.
type Info struct {
	OrderID       string
	Service       string
	Environment   string
	MCNumber      string
	DriverName    string
	LicenseNumber string
	LicenseState  string
	CompletedAt   time.Time
}

// Store is the reports directory.
type Store struct {
	dir string
}

// New returns the store at dir, creating it when missing.
func New(dir string) (*Store, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create reports directory: %w", err)
	}
	return &Store{dir: dir}, nil
}

// rel is the path of a report inside the directory. Both parts are checked
// so that no path can leave the directory.
func rel(orderID, service string) (string, error) {
	if uuid.Validate(orderID) != nil || !wire.HasReport(service) {
		return "", fmt.Errorf("report %s/%s: bad order or service", orderID, service)
	}
	return filepath.Join(orderID, service+".pdf"), nil
}

// Generate writes a PDF report for info and returns its relative path.
func (s *Store) Generate(info Info) (string, error) {
	p, err := rel(info.OrderID, info.Service)
	if err != nil {
		return "", err
	}
	doc := fpdf.New("P", "mm", "A4", "")
	doc.SetTitle(fmt.Sprintf("%s report %s", info.Service, info.OrderID), false)
	doc.SetCreator("vendorgate", false)
	doc.AddPage()
	doc.SetFont("Helvetica", "B", 16)
	doc.Cell(0, 10, fmt.Sprintf("%s report", titles[info.Service]))
	doc.Ln(14)
	doc.SetFont("Helvetica", "", 11)
	rows := [][2]string{
		{"Order", info.OrderID},
		{"Environment", info.Environment},
		{"MC number", info.MCNumber},
		{"Driver", info.DriverName},
		{"License", info.LicenseNumber + " (" + info.LicenseState + ")"},
		{"Completed", info.CompletedAt.UTC().Format(time.RFC3339)},
	}
	for _, r := range rows {
		doc.CellFormat(40, 8, r[0], "", 0, "L", false, 0, "")
		doc.CellFormat(0, 8, r[1], "", 1, "L", false, 0, "")
	}
	if info.Environment == "sandbox" {
		doc.Ln(6)
		doc.MultiCell(0, 6, "Sandbox report: produced by the simulated provider, not by a real check.", "", "L", false)
	}
	return p, s.write(p, func(w io.Writer) error { return doc.Output(w) })
}

var titles = map[string]string{
	wire.MVR:   "Motor Vehicle Record",
	wire.PSP:   "Pre-Employment Screening Program",
	wire.CDLIS: "CDLIS driver status",
}

// Write stores a PDF given by staff and returns its relative path.
func (s *Store) Write(orderID, service string, pdf []byte) (string, error) {
	p, err := rel(orderID, service)
	if err != nil {
		return "", err
	}
	return p, s.write(p, func(w io.Writer) error { _, err := w.Write(pdf); return err })
}

// write replaces the file at p atomically: a reader never sees half a PDF.
func (s *Store) write(p string, fill func(io.Writer) error) error {
	full := filepath.Join(s.dir, p)
	if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
		return fmt.Errorf("write report %s: %w", p, err)
	}
	f, err := os.CreateTemp(filepath.Dir(full), ".tmp-*.pdf")
	if err != nil {
		return fmt.Errorf("write report %s: %w", p, err)
	}
	err = fill(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), full)
	}
	if err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("write report %s: %w", p, err)
	}
	return nil
}

// Open opens the report at the relative path p for streaming; the caller
// closes it.
func (s *Store) Open(p string) (*os.File, int64, error) {
	f, err := os.Open(filepath.Join(s.dir, filepath.Clean(p)))
	if errors.Is(err, os.ErrNotExist) {
		return nil, 0, ErrNoFile
	}
	if err != nil {
		return nil, 0, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, err
	}
	return f, st.Size(), nil
}

// RemoveOrder deletes every report of an order.
func (s *Store) RemoveOrder(orderID string) error {
	if uuid.Validate(orderID) != nil {
		return fmt.Errorf("remove reports: bad order id")
	}
	if err := os.RemoveAll(filepath.Join(s.dir, orderID)); err != nil {
		return fmt.Errorf("remove reports of %s: %w", orderID, err)
	}
	return nil
}

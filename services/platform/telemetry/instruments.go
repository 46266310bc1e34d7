package telemetry

import (
	"errors"
	"fmt"

	"go.opentelemetry.io/otel/metric"
)

// Instruments makes a component's metric instruments on one meter and keeps their
// errors, so a constructor creates them all and checks once, with Err.
type Instruments struct {
	meter metric.Meter
	errs  []error
}

// NewInstruments returns an Instruments that makes its instruments on m.
func NewInstruments(m metric.Meter) *Instruments { return &Instruments{meter: m} }

// Counter returns the counter name, described by desc.
func (in *Instruments) Counter(name, desc string) metric.Int64Counter {
	c, err := in.meter.Int64Counter(name, metric.WithDescription(desc))
	in.keep(err)
	return c
}

// Int64Histogram returns the histogram name, described by desc.
func (in *Instruments) Int64Histogram(name, desc string, opts ...metric.Int64HistogramOption) metric.Int64Histogram {
	h, err := in.meter.Int64Histogram(name, append([]metric.Int64HistogramOption{metric.WithDescription(desc)}, opts...)...)
	in.keep(err)
	return h
}

// Float64Histogram returns the histogram name, described by desc.
func (in *Instruments) Float64Histogram(name, desc string, opts ...metric.Float64HistogramOption) metric.Float64Histogram {
	h, err := in.meter.Float64Histogram(name, append([]metric.Float64HistogramOption{metric.WithDescription(desc)}, opts...)...)
	in.keep(err)
	return h
}

// Int64Gauge returns the observable gauge name, described by desc; register its
// callback on the meter once Err is nil.
func (in *Instruments) Int64Gauge(name, desc string) metric.Int64ObservableGauge {
	g, err := in.meter.Int64ObservableGauge(name, metric.WithDescription(desc))
	in.keep(err)
	return g
}

// Float64Gauge returns the observable gauge name, described by desc.
func (in *Instruments) Float64Gauge(name, desc string, opts ...metric.Float64ObservableGaugeOption) metric.Float64ObservableGauge {
	g, err := in.meter.Float64ObservableGauge(name, append([]metric.Float64ObservableGaugeOption{metric.WithDescription(desc)}, opts...)...)
	in.keep(err)
	return g
}

// Err returns every error met so far as "<component> metrics: ...", or nil.
func (in *Instruments) Err(component string) error {
	if err := errors.Join(in.errs...); err != nil {
		return fmt.Errorf("%s metrics: %w", component, err)
	}
	return nil
}

func (in *Instruments) keep(err error) {
	if err != nil {
		in.errs = append(in.errs, err)
	}
}

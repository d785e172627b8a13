package sdk

// The plugin side's converters, exported to wire_test.go (package
// sdk_test), which checks them against the host side's in internal/wire.
var (
	DescriptionToProto        = descriptionToProto
	ConfigureRequestFromProto = configureRequestFromProto
	ConfigValueFromProto      = configValueFromProto
	DeliveriesFromProto       = deliveriesFromProto
	DeliveryFromProto         = deliveryFromProto
	RecipientFromProto        = recipientFromProto
	ContentFromProto          = contentFromProto
	ResultToProto             = resultToProto
	OutcomeToProto            = outcomeToProto
	HealthToProto             = healthToProto
	DurationToProto           = durationToProto
	TimeFromProto             = timeFromProto
)

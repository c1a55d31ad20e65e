//! [`Denial`]: a refused admission with its message, code and causes; [`FieldError`]s.

use kube::core::admission::{AdmissionRequest, AdmissionResponse};
use kube::core::response::{StatusCause, StatusDetails};
use kube::core::{DynamicObject, Status};

/// Warnings for the client (the API server returns them as `Warning` headers). Keep each
/// under 120 characters where possible.
pub type Warnings = Vec<String>;

/// A refused admission: a message for the client, an HTTP-style code (403 Forbidden by
/// default; 422 Invalid for field errors, with each as a cause), and warnings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Denial {
    message: String,
    code: u16,
    reason: String,
    causes: Vec<FieldError>,
    warnings: Warnings,
}

impl Denial {
    /// Refuses with `message`, code 403 (`Forbidden`).
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            code: 403,
            reason: "Forbidden".to_owned(),
            causes: Vec::new(),
            warnings: Vec::new(),
        }
    }

    /// Refuses because of `errors` in the object's fields: code 422 (`Invalid`), each error
    /// a cause, the message listing them.
    pub fn invalid(errors: impl IntoIterator<Item = FieldError>) -> Self {
        let causes: Vec<FieldError> = errors.into_iter().collect();
        let message = causes
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", ");
        Self {
            message,
            code: 422,
            reason: "Invalid".to_owned(),
            causes,
            warnings: Vec::new(),
        }
    }

    /// Sets the code and its reason (`409`, `"Conflict"`, say).
    pub fn with_code(mut self, code: u16, reason: impl Into<String>) -> Self {
        self.code = code;
        self.reason = reason.into();
        self
    }

    /// Adds warnings, returned with the denial.
    pub fn with_warnings(mut self, warnings: impl IntoIterator<Item = impl Into<String>>) -> Self {
        self.warnings.extend(warnings.into_iter().map(Into::into));
        self
    }

    /// The message.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The code.
    pub fn code(&self) -> u16 {
        self.code
    }

    /// The field errors (empty unless made with [`invalid`](Self::invalid)).
    pub fn causes(&self) -> &[FieldError] {
        &self.causes
    }

    /// The response to `request` denying it.
    pub fn into_response(self, request: &AdmissionRequest<DynamicObject>) -> AdmissionResponse {
        let mut response = AdmissionResponse::from(request);
        response.allowed = false;
        let mut status = Status::failure(&self.message, &self.reason).with_code(self.code);
        if !self.causes.is_empty() {
            status = status.with_details(StatusDetails {
                name: request.name.clone(),
                group: request.kind.group.clone(),
                kind: request.kind.kind.clone(),
                uid: String::new(),
                causes: self
                    .causes
                    .into_iter()
                    .map(FieldError::into_cause)
                    .collect(),
                retry_after_seconds: 0,
            });
        }
        response.result = status;
        if !self.warnings.is_empty() {
            response.warnings = Some(self.warnings);
        }
        response
    }
}

impl std::fmt::Display for Denial {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.message, self.code)
    }
}

/// One field's error, as Kubernetes reports it: the cause type (`FieldValueInvalid`,
/// `FieldValueRequired`, ...), the field's path (`spec.replicas`), and a message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    /// The cause type, a Kubernetes `CauseType`.
    pub cause: String,
    /// The field's path in the object, as its JSON names (`spec.containers[0].image`).
    pub field: String,
    /// What is wrong.
    pub message: String,
}

impl FieldError {
    /// A field error of cause type `cause`.
    pub fn new(
        cause: impl Into<String>,
        field: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        Self {
            cause: cause.into(),
            field: field.into(),
            message: message.into(),
        }
    }

    /// An invalid value (`FieldValueInvalid`).
    pub fn invalid(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self::new("FieldValueInvalid", field, message)
    }

    /// A required field missing (`FieldValueRequired`).
    pub fn required(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self::new("FieldValueRequired", field, message)
    }

    /// A field that may not be set (`FieldValueForbidden`).
    pub fn forbidden(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self::new("FieldValueForbidden", field, message)
    }

    /// A value outside the supported ones (`FieldValueNotSupported`).
    pub fn not_supported(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self::new("FieldValueNotSupported", field, message)
    }

    fn into_cause(self) -> StatusCause {
        StatusCause {
            reason: self.cause,
            message: self.message,
            field: self.field,
        }
    }
}

impl std::fmt::Display for FieldError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

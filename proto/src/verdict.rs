//! Reading a plugin's `ValidateResponse` as a verdict, strictly: an answer
//! that is not one of SUCCEEDED, FAILED or INPROGRESS, or that another gRPC
//! library could read as a different verdict, is not a verdict at all. The
//! gateway counts such an answer as the plugin's failure; a validation is
//! never promoted on bytes whose meaning depends on the decoder.

use bytes::Bytes;
use prost::Message;

use crate::partial::{WireError, varint_occurrences};
use crate::v1alpha1::{ValidateResponse, ValidationResult};

/// `ValidateResponse.result`'s field number.
const RESULT_FIELD: u32 = 1;

/// Why a `ValidateResponse` is not a verdict.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum VerdictError {
    #[error("ValidateResponse cannot be decoded: {0}")]
    Undecodable(#[from] prost::DecodeError),
    #[error("ValidateResponse is not well-formed: {0}")]
    Malformed(#[from] WireError),
    /// `result` is UNSPECIFIED (or absent), or a number the enum does not have.
    #[error(
        "ValidateResponse.result is {value}, which is no verdict (SUCCEEDED = 1, FAILED = 2, INPROGRESS = 3)"
    )]
    NoVerdict { value: i32 },
    /// `result` is sent more than once with different values, or once in a
    /// form some decoders skip: decoders may disagree on the verdict.
    #[error(
        "ValidateResponse.result is sent {count} times with different values or encodings; decoders disagree on which one counts"
    )]
    Ambiguous { count: usize },
}

/// The verdict of an encoded `ValidateResponse`, or why it is none.
pub fn read_validate(message: Bytes) -> Result<ValidateResponse, VerdictError> {
    let occurrences = varint_occurrences(&message, RESULT_FIELD)?;
    if let Some(first) = occurrences.first()
        && (first.is_none() || occurrences.iter().any(|o| o != first))
    {
        return Err(VerdictError::Ambiguous {
            count: occurrences.len(),
        });
    }
    let answer = ValidateResponse::decode(message)?;
    match ValidationResult::try_from(answer.result) {
        Ok(
            ValidationResult::Succeeded | ValidationResult::Failed | ValidationResult::Inprogress,
        ) => Ok(answer),
        _ => Err(VerdictError::NoVerdict {
            value: answer.result,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(result: ValidationResult) -> Vec<u8> {
        ValidateResponse {
            result: result as i32,
            message: "why".into(),
            recheck_after: None,
        }
        .encode_to_vec()
    }

    #[test]
    fn only_the_three_verdicts_are_read() {
        use ValidationResult::*;
        for result in [Succeeded, Failed, Inprogress] {
            let read = read_validate(answer(result).into()).expect("a verdict");
            assert_eq!(read.result, result as i32);
        }
        assert_eq!(
            read_validate(answer(Unspecified).into()),
            Err(VerdictError::NoVerdict { value: 0 })
        );
        // An unknown enum number (open enums keep it).
        assert_eq!(
            read_validate(Bytes::from_static(&[0x08, 0x07])),
            Err(VerdictError::NoVerdict { value: 7 })
        );
        assert_eq!(
            read_validate(Bytes::new()),
            Err(VerdictError::NoVerdict { value: 0 })
        );
    }

    #[test]
    fn answers_decoders_read_differently_are_refused() {
        // FAILED then SUCCEEDED: last-wins decoders say SUCCEEDED, a
        // first-wins one FAILED.
        let twice = Bytes::from_static(&[0x08, 0x02, 0x08, 0x01]);
        assert_eq!(
            read_validate(twice),
            Err(VerdictError::Ambiguous { count: 2 })
        );
        // The same value twice decides the same everywhere.
        let same = Bytes::from_static(&[0x08, 0x02, 0x08, 0x02]);
        assert_eq!(
            read_validate(same).map(|a| a.result),
            Ok(ValidationResult::Failed as i32)
        );
        // `result` as a packed list: some decoders skip a singular field sent
        // with the wrong wire type, others refuse it or take it.
        let packed = Bytes::from_static(&[0x08, 0x02, 0x0a, 0x01, 0x01]);
        assert_eq!(
            read_validate(packed),
            Err(VerdictError::Ambiguous { count: 2 })
        );
        assert!(matches!(
            read_validate(Bytes::from_static(&[0x08])),
            Err(VerdictError::Malformed(_))
        ));
    }
}

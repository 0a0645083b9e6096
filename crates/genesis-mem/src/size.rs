//! Human size strings: `"2GB"`, `"512MiB"`, `"1.5 GiB"`.

/// A size string that could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SizeError {
    /// A size string that is not `<number>[unit]` with a known unit.
    #[error(
        "malformed size {input:?}: expected a number with an optional unit (B, KB, KiB, MB, MiB, GB, GiB, TB, TiB)"
    )]
    MalformedSize {
        /// The string given.
        input: String,
    },
    /// A size that does not fit in 64 bits.
    #[error("size {input:?} is larger than 2^64 bytes")]
    SizeOverflow {
        /// The string given.
        input: String,
    },
}

/// Parses a byte size such as `"2GB"`, `"512MiB"`, `"1.5 GiB"` or `"4096"`.
///
/// Decimal units (KB, MB, GB, TB) are powers of 1000 and binary units (KiB, MiB, GiB, TiB)
/// powers of 1024, as in the SI / IEC standards; units are case-insensitive.
pub fn parse_size(input: &str) -> Result<u64, SizeError> {
    let malformed = || SizeError::MalformedSize {
        input: input.to_string(),
    };
    let s = input.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    if num.is_empty() || num.chars().filter(|&c| c == '.').count() > 1 || num.ends_with('.') {
        return Err(malformed());
    }
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" => 1000,
        "m" | "mb" => 1000u64.pow(2),
        "g" | "gb" => 1000u64.pow(3),
        "t" | "tb" => 1000u64.pow(4),
        "kib" => 1 << 10,
        "mib" => 1 << 20,
        "gib" => 1 << 30,
        "tib" => 1 << 40,
        _ => return Err(malformed()),
    };
    let (int_part, frac_part) = num.split_once('.').unwrap_or((num, ""));
    let int: u64 = int_part.parse().map_err(|_| SizeError::SizeOverflow {
        input: input.into(),
    })?;
    let mut total = int
        .checked_mul(mult)
        .ok_or_else(|| SizeError::SizeOverflow {
            input: input.into(),
        })?;
    if !frac_part.is_empty() {
        // Exact decimal fraction times the multiplier, rounded down to whole bytes.
        let digits = frac_part.len().min(18) as u32;
        let frac: u128 = frac_part[..digits as usize]
            .parse()
            .map_err(|_| malformed())?;
        let add = frac * u128::from(mult) / 10u128.pow(digits);
        total = total
            .checked_add(u64::try_from(add).map_err(|_| SizeError::SizeOverflow {
                input: input.into(),
            })?)
            .ok_or_else(|| SizeError::SizeOverflow {
                input: input.into(),
            })?;
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_units() {
        assert_eq!(parse_size("2GB").unwrap(), 2_000_000_000);
        assert_eq!(parse_size("512MiB").unwrap(), 512 << 20);
        assert_eq!(parse_size(" 1.5 GiB ").unwrap(), 3 << 29);
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size("1kb").unwrap(), 1000);
    }

    #[test]
    fn rejects_malformed() {
        for bad in ["", "GB", "1..5GB", "1.GB", "12 parsecs", "-1GB", "1e9"] {
            assert!(
                matches!(parse_size(bad), Err(SizeError::MalformedSize { .. })),
                "{bad}"
            );
        }
        assert!(matches!(
            parse_size("99999999999TiB"),
            Err(SizeError::SizeOverflow { .. })
        ));
    }
}

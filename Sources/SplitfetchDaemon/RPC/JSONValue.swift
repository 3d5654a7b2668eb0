import Foundation

/// Any JSON value: JSON-RPC parameters are positional and of mixed types (aria2's `addUri` takes a
/// token, an array of strings, an object and a number).
public enum JSONValue: Sendable, Equatable, Codable {
    case null
    case bool(Bool)
    case number(Double)
    case string(String)
    case array([JSONValue])
    case object([String: JSONValue])

    public init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if container.decodeNil() {
            self = .null
        } else if let value = try? container.decode(Bool.self) {
            self = .bool(value)
        } else if let value = try? container.decode(Double.self) {
            self = .number(value)
        } else if let value = try? container.decode(String.self) {
            self = .string(value)
        } else if let value = try? container.decode([JSONValue].self) {
            self = .array(value)
        } else {
            self = .object(try container.decode([String: JSONValue].self))
        }
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        switch self {
        case .null: try container.encodeNil()
        case .bool(let value): try container.encode(value)
        case .number(let value):
            if value.rounded() == value, abs(value) < 1e15 { try container.encode(Int64(value)) } else { try container.encode(value) }
        case .string(let value): try container.encode(value)
        case .array(let value): try container.encode(value)
        case .object(let value): try container.encode(value)
        }
    }

    public var string: String? { if case .string(let s) = self { s } else { nil } }
    public var array: [JSONValue]? { if case .array(let a) = self { a } else { nil } }
    public var object: [String: JSONValue]? { if case .object(let o) = self { o } else { nil } }
    /// A whole number, given as a number or (as aria2's clients often do) as a string of digits.
    public var integer: Int? {
        switch self {
        case .number(let n) where n.rounded() == n && abs(n) < 1e15: Int(n)
        case .string(let s): Int(s)
        default: nil
        }
    }
}

extension JSONValue: ExpressibleByStringLiteral, ExpressibleByArrayLiteral, ExpressibleByDictionaryLiteral,
    ExpressibleByIntegerLiteral, ExpressibleByBooleanLiteral {
    public init(stringLiteral value: String) { self = .string(value) }
    public init(arrayLiteral elements: JSONValue...) { self = .array(elements) }
    public init(dictionaryLiteral elements: (String, JSONValue)...) {
        self = .object(Dictionary(elements, uniquingKeysWith: { _, last in last }))
    }
    public init(integerLiteral value: Int) { self = .number(Double(value)) }
    public init(booleanLiteral value: Bool) { self = .bool(value) }
}

extension JSONValue {
    /// The value as JSON text (UTF-8). Written directly rather than through `JSONEncoder`,
    /// which took most of a 100-job `tellWaiting`'s time going through `Encodable`.
    public func serialized() -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(256)
        write(into: &out)
        return out
    }

    func write(into out: inout [UInt8]) {
        switch self {
        case .null: out += "null".utf8
        case .bool(let value): out += (value ? "true" : "false").utf8
        case .number(let value):
            if !value.isFinite {
                out += "null".utf8
            } else if value.rounded() == value, abs(value) < 1e15 {
                out += String(Int64(value)).utf8
            } else {
                out += "\(value)".utf8
            }
        case .string(let value): Self.write(string: value, into: &out)
        case .array(let values):
            out.append(UInt8(ascii: "["))
            for (index, value) in values.enumerated() {
                if index > 0 { out.append(UInt8(ascii: ",")) }
                value.write(into: &out)
            }
            out.append(UInt8(ascii: "]"))
        case .object(let fields):
            out.append(UInt8(ascii: "{"))
            var first = true
            for (key, value) in fields {
                if !first { out.append(UInt8(ascii: ",")) }
                first = false
                Self.write(string: key, into: &out)
                out.append(UInt8(ascii: ":"))
                value.write(into: &out)
            }
            out.append(UInt8(ascii: "}"))
        }
    }

    static func write(string: String, into out: inout [UInt8]) {
        out.append(UInt8(ascii: "\""))
        for byte in string.utf8 {
            switch byte {
            case UInt8(ascii: "\""): out += #"\""#.utf8
            case UInt8(ascii: "\\"): out += #"\\"#.utf8
            case UInt8(ascii: "\n"): out += #"\n"#.utf8
            case UInt8(ascii: "\r"): out += #"\r"#.utf8
            case UInt8(ascii: "\t"): out += #"\t"#.utf8
            case 0..<0x20:
                let hex = Array("0123456789abcdef".utf8)
                out += #"\u00"#.utf8
                out.append(hex[Int(byte >> 4)])
                out.append(hex[Int(byte & 0xF)])
            default: out.append(byte)
            }
        }
        out.append(UInt8(ascii: "\""))
    }
}

extension JSONValue {
    /// Reads JSON text through Foundation's `JSONSerialization`. Decoding the untyped tree
    /// through `Decodable` tried each kind in turn and threw at each miss: it took a third of
    /// the daemon's time for a `system.multicall` of 1,000 `addUri`s.
    public static func parse(_ bytes: [UInt8]) throws -> JSONValue {
        convert(try JSONSerialization.jsonObject(with: Data(bytes), options: [.fragmentsAllowed]))
    }

    /// Foundation's booleans are `NSNumber`s of their own class.
    private static let booleanClass = ObjectIdentifier(type(of: NSNumber(value: true)))

    /// The Swift kinds are tried first: a Swift array, dictionary or string tested against a class
    /// (`NSNull`, `NSNumber`) is bridged to an object for the test, which took a third of the time
    /// of a 1,000-add `system.multicall`.
    private static func convert(_ any: Any) -> JSONValue {
        switch any {
        case let string as String: return .string(string)
        case let object as [String: Any]: return .object(object.mapValues(convert))
        case let array as [Any]: return .array(array.map(convert))
        case is NSNull: return .null
        case let number as NSNumber:
            return ObjectIdentifier(type(of: number)) == booleanClass ? .bool(number.boolValue) : .number(number.doubleValue)
        default: return .null
        }
    }
}
